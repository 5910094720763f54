package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandflow/sandflow/host"
)

// readJSON refuses a member that names no field by its exact case, takes
// no body as {}, and refuses what is not an object.
func TestReadJSONIsStrict(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 10}}
	for _, c := range []struct {
		body string
		ok   bool
		want host.Answer
	}{
		{`{"optionId":"approve"}`, true, host.Answer{OptionID: "approve"}},
		{``, true, host.Answer{}},
		{" \n", true, host.Answer{}},
		{`{"optionid":"approve"}`, false, host.Answer{}},
		{`{"OptionId":"approve"}`, false, host.Answer{}},
		{`{"text":"x","extra":1}`, false, host.Answer{}},
		{`["approve"]`, false, host.Answer{}},
		{`{"text":"x"} {}`, false, host.Answer{}},
	} {
		var a host.Answer
		err := s.readJSON(httptest.NewRecorder(), httptest.NewRequest("POST", "/", bytes.NewReader([]byte(c.body))), &a)
		var ae *apiError
		switch {
		case c.ok && err != nil:
			t.Errorf("%q: %v", c.body, err)
		case c.ok && a != c.want:
			t.Errorf("%q: decoded %+v, want %+v", c.body, a, c.want)
		case !c.ok && (!errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.code != "bad_request"):
			t.Errorf("%q: err %v, want a 400 bad_request", c.body, err)
		}
	}
}

// BenchmarkReadJSONAnswer times readJSON on an answer's body: the read,
// the decode, and the check of its members against the struct's fields.
func BenchmarkReadJSONAnswer(b *testing.B) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 10}}
	body := []byte(`{"optionId":"approve"}`)
	r := httptest.NewRequest("POST", "/", nil)
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		var a host.Answer
		rd.Reset(body)
		r.Body = io.NopCloser(rd)
		if err := s.readJSON(nil, r, &a); err != nil {
			b.Fatal(err)
		}
	}
}
