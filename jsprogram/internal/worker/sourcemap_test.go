package worker

import (
	"testing"

	"github.com/dop251/goja/parser"
)

// The parser reads the file a sourceMappingURL comment names unless source
// maps are off: with the options every program is parsed with, a loader
// is never asked; without them, it is asked for the host's file.
func TestSourceMapsAreNeverLoaded(t *testing.T) {
	src := bodyPrefix + "return 1;\n//# sourceMappingURL=file:///etc/passwd\n})"
	var asked []string
	spy := parser.WithSourceMapLoader(func(path string) ([]byte, error) {
		asked = append(asked, path)
		return nil, nil
	})
	if _, err := parser.ParseFile(nil, fileName, src, 0, append(append([]parser.Option{}, parseOptions...), spy)...); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 0 {
		t.Fatalf("with parseOptions the parser asked for %q", asked)
	}
	if _, err := parser.ParseFile(nil, fileName, src, 0, spy); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != "file:///etc/passwd" {
		t.Fatalf("without parseOptions the parser asked for %q; this test no longer shows what the option prevents", asked)
	}
	if _, perr := compileBody("return 1;\n//# sourceMappingURL=file:///etc/passwd"); perr != nil {
		t.Fatal(perr)
	}
}
