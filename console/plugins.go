package console

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/plugins"
)

func (c *Console) plugins(w http.ResponseWriter, r *http.Request, si *signin) error {
	ps, err := c.h.Plugins(r.Context())
	if err != nil {
		return err
	}
	tools, err := c.h.Tools(r.Context())
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "plugins", si, map[string]any{"Plugins": ps, "Tools": tools})
	return nil
}

// uploadPlugin registers a new version: a JavaScript tool (its manifest is
// its defineWorkflowTool call), or a WebAssembly module with a manifest.
func (c *Console) uploadPlugin(w http.ResponseWriter, r *http.Request, _ *signin) error {
	f, _, err := r.FormFile("module")
	if err != nil {
		return errf(http.StatusBadRequest, ErrBadForm, "choose a module or script file")
	}
	defer f.Close()
	module, err := io.ReadAll(io.LimitReader(f, c.cfg.MaxUploadBytes+1))
	if err != nil {
		return err
	}
	if int64(len(module)) > c.cfg.MaxUploadBytes {
		return errf(http.StatusRequestEntityTooLarge, ErrBadForm, "the module is larger than %d bytes", c.cfg.MaxUploadBytes)
	}
	manifest := strings.TrimSpace(r.PostForm.Get("manifest"))
	u := plugins.Upload{Module: module, Name: strings.TrimSpace(r.PostForm.Get("name"))}
	if manifest != "" {
		u.Manifest = func() ([]byte, error) { return []byte(manifest), nil }
	}
	d, err := plugins.Classify(u)
	var ue *plugins.UploadError
	switch {
	case errors.As(err, &ue) && ue.Problem == plugins.ProblemNoName:
		return errf(http.StatusBadRequest, ErrBadForm, "a script needs a tool name")
	case errors.As(err, &ue) && ue.Problem == plugins.ProblemNoManifest:
		// The form's manifest field is always there: left empty for a
		// module, it is refused as the empty manifest it is.
		_, err = plugins.ParseManifest([]byte(manifest))
		return err
	case err != nil:
		return err
	}
	if _, err := jsprogram.Register(r.Context(), c.h, d); err != nil {
		return err
	}
	http.Redirect(w, r, "/console/plugins", http.StatusSeeOther)
	return nil
}

func (c *Console) deletePlugin(w http.ResponseWriter, r *http.Request, _ *signin) error {
	v, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || v <= 0 {
		return errf(http.StatusBadRequest, ErrBadForm, "the version must be a positive number")
	}
	if err := c.h.DeletePluginVersion(r.Context(), r.PathValue("name"), v); err != nil {
		return err
	}
	http.Redirect(w, r, "/console/plugins", http.StatusSeeOther)
	return nil
}
