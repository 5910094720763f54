package worker

import (
	"testing"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"
)

// A body that ends before its last statement does is located at the end
// of the body, not at the wrapper's closing token on a line the body
// does not have.
func TestSyntaxErrorAtTheEndOfTheBody(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int
	}{
		{"return {", 1, 9},
		{"const a = 1;\nreturn f(a,", 2, 12},
		{"const a = [1,\n", 2, 1},
	} {
		_, e := compileBody(tc.src)
		if e == nil {
			t.Fatalf("%q compiled", tc.src)
		}
		if e.Code != proto.CodeSyntaxError || e.Line != tc.line || e.Column != tc.col {
			t.Errorf("%q: %+v, want line %d, column %d", tc.src, e, tc.line, tc.col)
		}
	}
	// An error inside the body keeps its own position.
	_, e := compileBody("const a = 1;\nconst b = ;\nreturn a;")
	if e == nil || e.Line != 2 || e.Column != 11 {
		t.Errorf("error inside the body: %+v", e)
	}
}
