package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/sse"
)

// inboxPoll is how often a live inbox looks for new and settled
// questions: the host has no watch over every run's questions.
const inboxPoll = time.Second

// openQuestions lists the open questions, newest first.
func (c *Console) openQuestions(ctx context.Context) ([]host.Question, error) {
	qs, err := c.h.Questions(ctx, true)
	if err != nil {
		return nil, err
	}
	slices.Reverse(qs)
	return qs, nil
}

func (c *Console) inbox(w http.ResponseWriter, r *http.Request, si *signin) error {
	qs, err := c.openQuestions(r.Context())
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "inbox", si, map[string]any{"Questions": qs})
	return nil
}

// inboxStream sends the inbox's list again whenever the set of open
// questions changes: new ones appear, answered and withdrawn ones leave.
func (c *Console) inboxStream(w http.ResponseWriter, r *http.Request, si *signin) error {
	return c.stream(w, r, func(sw *sse.Writer) error {
		last := "\x00"
		t := time.NewTicker(inboxPoll)
		defer t.Stop()
		for {
			qs, err := c.openQuestions(r.Context())
			if err != nil {
				return err
			}
			ids := make([]string, len(qs))
			for i, q := range qs {
				ids[i] = q.ID
			}
			if key := strings.Join(ids, ","); key != last {
				last = key
				html, err := c.fragment("questions", si, map[string]any{"Questions": qs})
				if err != nil {
					return err
				}
				if err := sendFragment(sw, "", html); err != nil {
					return err
				}
			}
			select {
			case <-t.C:
			case <-r.Context().Done():
				return nil
			case <-c.ctx.Done():
				return nil
			}
		}
	})
}

// settled is what became of a question, read from its run's log.
type settled struct {
	Answer *abi.AskAnswer
	Time   time.Time
}

func (c *Console) questionPage(ctx context.Context, id string) (map[string]any, error) {
	q, err := c.h.Question(ctx, id)
	if err != nil {
		return nil, err
	}
	ri, err := c.h.Run(ctx, q.RunID)
	if err != nil {
		return nil, err
	}
	data := map[string]any{"Q": q, "Run": ri}
	if !q.Open {
		evs, err := c.h.Events(ctx, q.RunID)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Kind != host.EvAskSettled && e.Kind != host.EvAskOpened {
				continue
			}
			var d struct {
				AskID  string         `json:"askId"`
				Answer *abi.AskAnswer `json:"answer"`
			}
			if json.Unmarshal(e.Data, &d) == nil && d.AskID == id && d.Answer != nil {
				data["Settled"] = settled{Answer: d.Answer, Time: e.Time}
			}
		}
	}
	return data, nil
}

func (c *Console) question(w http.ResponseWriter, r *http.Request, si *signin) error {
	data, err := c.questionPage(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "question", si, data)
	return nil
}

// answer answers a question with the option whose button was clicked, or
// the freeform text, and shows the question settled and its run's next
// state (or the run still working, if it has not settled within Wait).
func (c *Console) answer(w http.ResponseWriter, r *http.Request, si *signin) error {
	id := r.PathValue("id")
	a := host.Answer{OptionID: r.PostForm.Get("option"), Text: r.PostForm.Get("text")}
	if a.OptionID != "" {
		a.Text = ""
	} else if a.Text == "" {
		return errf(http.StatusBadRequest, ErrBadForm, "choose an option or write an answer")
	}
	// The answer is committed before the page answers (a refusal comes
	// back at once, and nothing is acknowledged that a crash could lose);
	// then the run is driven, in the background past Wait.
	recorded, err := c.h.RecordAnswer(context.WithoutCancel(r.Context()), id, a)
	if err != nil {
		return err
	}
	if err := c.drive(r, func(ctx context.Context) error { _, err := c.h.Drive(ctx, recorded.ID); return err }); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	http.Redirect(w, r, "/console/questions/"+id, http.StatusSeeOther)
	return nil
}
