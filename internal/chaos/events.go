package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandflow/sandflow/internal/sse"
)

// streamRun reads an ended run's log from the server's event stream,
// which closes after the last entry of an ended run. It reports false when
// the run has not ended or the stream did not end as it should: the log is
// then read from the store after the server stops.
func streamRun(ctx context.Context, cl *api, id string) (*RunLog, bool) {
	var body struct {
		Run runInfo `json:"run"`
	}
	if st, err := cl.do(ctx, "GET", "/v1/runs/"+id, nil, &body); err != nil || st != http.StatusOK || !body.Run.ended() {
		return nil, false
	}
	req, err := http.NewRequestWithContext(ctx, "GET", cl.base+"/v1/runs/"+id+"/events", nil)
	if err != nil {
		return nil, false
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	resp, err := cl.c.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	l, err := parseStream(id, resp.Body)
	return l, err == nil
}

// parseStream reads Server-Sent Events up to the end event.
func parseStream(id string, stream io.Reader) (*RunLog, error) {
	l := &RunLog{ID: id}
	r := sse.NewReader(stream)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Type == "end" {
			var end struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal(ev.Data, &end); err != nil {
				return nil, err
			}
			l.Status = end.Status
			return l, nil
		}
		var e Event
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			return nil, fmt.Errorf("event %q: %v", truncate(ev.Data), err)
		}
		if e.Kind != ev.Type {
			return nil, fmt.Errorf("event %s carries kind %s", ev.Type, e.Kind)
		}
		l.Events = append(l.Events, e)
	}
	return nil, fmt.Errorf("the stream ended without its end event")
}
