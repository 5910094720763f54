package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
	l, err := parseStream(id, bufio.NewScanner(resp.Body))
	return l, err == nil
}

// parseStream reads Server-Sent Events up to the end event.
func parseStream(id string, sc *bufio.Scanner) (*RunLog, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	l := &RunLog{ID: id}
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := []byte(strings.TrimPrefix(line, "data: "))
			if event == "end" {
				var end struct {
					Status string `json:"status"`
				}
				if err := json.Unmarshal(data, &end); err != nil {
					return nil, err
				}
				l.Status = end.Status
				return l, nil
			}
			var e Event
			if err := json.Unmarshal(data, &e); err != nil {
				return nil, fmt.Errorf("event %q: %v", truncate(data), err)
			}
			if e.Kind != event {
				return nil, fmt.Errorf("event %s carries kind %s", event, e.Kind)
			}
			l.Events = append(l.Events, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the stream ended without its end event")
}
