package agents

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/plugins"
)

// Approval policies of a loop agent's tool (LoopTool.Approval).
const (
	// ApprovalNever runs every call without asking (the default).
	ApprovalNever = "never"
	// ApprovalAlways asks a person before each call.
	ApprovalAlways = "always"
	// ApprovalOnce asks before the first call of the tool in a session:
	// the turn, and the turns whose signed approvals the turn's history
	// carries.
	ApprovalOnce = "once"
)

// ApprovalRule decides a call's approval from its input: when the
// argument Field (a top-level property) matches Match (RE2, against the
// value's text; a string's without quotes), the call's policy is
// Approval. The first rule that matches decides; none, the tool's. A
// tool's manifest may declare the same rules (plugins.ManifestApproval).
type ApprovalRule = plugins.ApprovalRule

// Approval is a person's approval of a tool call, as a turn's result
// reports it and a later turn's history may carry it back. Signature is
// an HMAC-SHA256, under the server's secret, of the agent, the tool, the
// call id and the arguments: a history whose approvals were altered, or
// made up, fails the turn with an ApprovalSignatureError.
type Approval struct {
	Tool      string `json:"tool"`
	CallID    string `json:"callId"`
	Arguments string `json:"arguments"`
	Signature string `json:"signature"`
}

// ApprovalSignatureError is the error type of a turn whose history holds
// an approval with a missing or wrong signature.
const ApprovalSignatureError = "ApprovalSignatureError"

// ErrBadApprovalSignature is the error of a turn refused for an approval
// its history carried with a missing or wrong signature.
var ErrBadApprovalSignature = errors.New("an approval in the history is not signed by this server")

func validPolicy(p string) bool {
	return p == "" || p == ApprovalNever || p == ApprovalAlways || p == ApprovalOnce
}

func (t *LoopTool) checkApproval() error {
	if !validPolicy(t.Approval) {
		return fmt.Errorf("tool %s: approval %q is not never, always or once", t.name(), t.Approval)
	}
	for i, r := range t.ApprovalRules {
		if r.Field == "" || !validPolicy(r.Approval) || r.Approval == "" {
			return fmt.Errorf("tool %s: approval rule %d needs a field and an approval of never, always or once", t.name(), i+1)
		}
		if _, err := regexp.Compile(r.Match); err != nil {
			return fmt.Errorf("tool %s: approval rule %d: %v", t.name(), i+1, err)
		}
	}
	return nil
}

// policy is the approval policy of a call with these arguments.
func (t *LoopTool) policy(args string) string {
	var in map[string]json.RawMessage
	_ = json.Unmarshal([]byte(args), &in)
	for _, r := range t.ApprovalRules {
		v, ok := in[r.Field]
		if !ok {
			continue
		}
		text := string(v)
		var s string
		if json.Unmarshal(v, &s) == nil {
			text = s
		}
		if re, err := regexp.Compile(r.Match); err == nil && re.MatchString(text) {
			return r.Approval
		}
	}
	if t.Approval == "" {
		return ApprovalNever
	}
	return t.Approval
}

// approvalSecretEnv names the environment variable that holds the secret
// approvals are signed with.
const approvalSecretEnv = "SANDFLOW_APPROVAL_SECRET"

// secret is the key approvals are signed with: ApprovalSecret, else
// SANDFLOW_APPROVAL_SECRET, else the one in SecretFile (made there, 32
// random bytes, on first use), else one made for this process.
func (l *Loop) secret() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ApprovalSecret) > 0 {
		return l.ApprovalSecret, nil
	}
	if s := os.Getenv(approvalSecretEnv); s != "" {
		return []byte(s), nil
	}
	if l.SecretFile != "" {
		if b, err := os.ReadFile(l.SecretFile); err == nil && len(b) >= 32 {
			return b, nil
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if l.SecretFile != "" {
		if err := writeSecret(l.SecretFile, key); err != nil {
			return nil, err
		}
	}
	l.ApprovalSecret = key
	return key, nil
}

// writeSecret writes a new secret file, durably, readable by its owner
// only; a file another process wrote first wins.
func writeSecret(path string, key []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".approval-secret-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(key); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

func sign(key []byte, agent string, a Approval) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{"sandflow-approval-v1", agent, a.Tool, a.CallID, a.Arguments}, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// approvalsAndKey reads a sign or verify step's approvals, and the key
// they are signed with.
func (l *Loop) approvalsAndKey(in abi.StepInput) ([]Approval, []byte, *abi.ErrorObject) {
	var list []Approval
	if err := json.Unmarshal(in.Input, &list); err != nil {
		return nil, nil, fatal("the approvals: %v", err)
	}
	key, err := l.secret()
	if err != nil {
		return nil, nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: "the approval secret: " + err.Error()}
	}
	return list, key, nil
}

// signStep signs the approvals a turn gave, for its result.
func (l *Loop) signStep(a *LoopAgent, in abi.StepInput) (any, *abi.ErrorObject) {
	list, key, eo := l.approvalsAndKey(in)
	if eo != nil {
		return nil, eo
	}
	for i := range list {
		list[i].Signature = sign(key, a.Name, list[i])
	}
	return list, nil
}

// verifyStep checks the signatures of the approvals a turn's history
// carries.
func (l *Loop) verifyStep(a *LoopAgent, in abi.StepInput) (any, *abi.ErrorObject) {
	list, key, eo := l.approvalsAndKey(in)
	if eo != nil {
		return nil, eo
	}
	for _, ap := range list {
		if !hmac.Equal([]byte(sign(key, a.Name, ap)), []byte(ap.Signature)) {
			return verdict{Bad: fmt.Sprintf("%v: the approval of %s call %s", ErrBadApprovalSignature, ap.Tool, ap.CallID)}, nil
		}
	}
	return verdict{}, nil
}

// verdict is the result of the step that checks a history's approvals:
// Bad says what is wrong ("" when nothing is). The turn fails with it as
// an ApprovalSignatureError, which is not retried.
type verdict struct {
	Bad string `json:"bad,omitempty"`
}

// askApproval asks a person whether a call may run; it returns whether
// it was approved and, if not, what the model is told.
func askApproval(g *guest, agent, shown string, c toolCall) (bool, string) {
	args := c.Arguments
	var v any
	if json.Unmarshal([]byte(args), &v) == nil {
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			args = string(b)
		}
	}
	f := g.start(abi.OpAsk, "", abi.AskRequest{
		Title:         fmt.Sprintf("Approve %s?", c.Name),
		Prompt:        fmt.Sprintf("The agent %s wants to call the tool %s with this input:\n%s", agent, c.Name, args),
		Display:       abi.DisplayConfirmation,
		Options:       []abi.AskOption{{ID: "approve", Label: "Approve", Style: abi.StylePrimary}, {ID: "deny", Label: "Deny", Style: abi.StyleDanger}},
		AllowFreeform: true,
	})
	g.await(f)
	if f.err != nil {
		return false, "the call was not approved: " + f.err.Message
	}
	var ans abi.AskAnswer
	_ = json.Unmarshal(f.val, &ans)
	switch {
	case ans.Status == abi.AnswerAnswered && ans.OptionID == "approve":
		return true, ""
	case ans.Status == abi.AnswerAnswered && ans.OptionID == "deny":
		return false, "a person denied this call; do not call it again with the same input"
	case ans.Status == abi.AnswerAnswered:
		return false, "a person denied this call, saying: " + ans.Text
	}
	return false, fmt.Sprintf("the call was not approved (the question ended %s)", ans.Status)
}

// manifestApprovals are the approval settings the manifests of the
// agent's host tools declare (the latest version's), by the host tool's
// name.
func manifestApprovals(ctx context.Context, h *host.Host, a *LoopAgent) (map[string]*plugins.ManifestApproval, error) {
	need := false
	for _, t := range a.Tools {
		need = need || t.Tool != "" && t.Approval == "" && len(t.ApprovalRules) == 0
	}
	if !need {
		return nil, nil
	}
	ps, err := h.Plugins(ctx)
	if err != nil {
		return nil, err
	}
	latest := map[string]host.Plugin{}
	for _, p := range ps {
		if p.Version > latest[p.Name].Version {
			latest[p.Name] = p
		}
	}
	out := map[string]*plugins.ManifestApproval{}
	for name, p := range latest {
		if p.Manifest.Approval != nil {
			out[name] = p.Manifest.Approval
		}
	}
	return out, nil
}
