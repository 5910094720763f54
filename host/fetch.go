package host

import (
	"context"
	"encoding/json"

	"github.com/sandflow/sandflow/host/internal/fetch"
)

// fetch is the built-in http.fetch capability (package fetch), its
// response body capped at half the plugin's payload limit: the body may
// grow a third as base64, within the JSON of the step's result.
func (h *Host) fetch(ctx context.Context, lp *loadedPlugin, input []byte) (json.RawMessage, error) {
	return fetch.Do(ctx, h.opts.HTTPClient, lp.m.HTTPAllow, int64(lp.limits.PayloadBytes/2), input)
}
