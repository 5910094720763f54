package session

import "context"

// delivery is a message of results Deliver gave, by the key it was asked
// for.
type delivery struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// Deliver is Results for a caller that may ask again for the same
// message, under the same key, without knowing whether it got it (a step
// of a run, retried after a crash): the message given for the last key
// is given again for that key, and the results it took are not given to
// another. The results and the key are stored in one write. It also
// says how many tasks still work.
func (s *Session) Deliver(ctx context.Context, key string) (message string, working int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.rec.Delivery; d != nil && d.Key == key {
		message = d.Text
		s.refresh(ctx)
	} else {
		message, _ = s.takeResults(ctx)
		s.rec.Delivery = &delivery{Key: key, Text: message}
		if err := s.save(ctx); err != nil {
			return "", 0, err
		}
	}
	for _, t := range s.rec.Tasks {
		if t.Status == Working {
			working++
		}
	}
	return message, working, nil
}
