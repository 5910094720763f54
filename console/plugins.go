package console

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
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
	if manifest == "" && jsprogram.IsScript(module) {
		name := strings.TrimSpace(r.PostForm.Get("name"))
		if name == "" {
			return errf(http.StatusBadRequest, ErrBadForm, "a script needs a tool name")
		}
		if _, err := jsprogram.RegisterTool(r.Context(), c.h, name, module); err != nil {
			return err
		}
	} else {
		m, err := host.ParseManifest([]byte(manifest))
		if err != nil {
			return err
		}
		if _, err := c.h.AddPlugin(r.Context(), module, m); err != nil {
			return err
		}
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
