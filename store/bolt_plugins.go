package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// PutPlugin implements Store.
func (s *Bolt) PutPlugin(ctx context.Context, p Plugin, module []byte) (Plugin, error) {
	if p.Name == "" || strings.ContainsRune(p.Name, 0) {
		return Plugin{}, fmt.Errorf("%w: plugin name %q", ErrBadBatch, p.Name)
	}
	if p.ModuleHash == "" {
		return Plugin{}, fmt.Errorf("%w: plugin %s has no module hash", ErrBadBatch, p.Name)
	}
	err := s.update(func(w *wtx) error {
		plugins := w.read(bPlugins)
		latest := 0
		prefix := append([]byte(p.Name), 0)
		c := plugins.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) == len(prefix)+4 {
				latest = int(binary.BigEndian.Uint32(k[len(prefix):]))
			}
		}
		p.Version = latest + 1
		p.Size = len(module)
		p.CreatedAt = p.CreatedAt.UTC()
		v, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("%w: plugin %s: %v", ErrBadBatch, p.Name, err)
		}
		if err := w.put(bPlugins, pluginKey(p.Name, p.Version), v); err != nil {
			return err
		}
		if w.read(bModules).Get([]byte(p.ModuleHash)) == nil {
			return w.put(bModules, []byte(p.ModuleHash), packValue(nil, module, s.threshold))
		}
		return nil
	})
	if err != nil {
		return Plugin{}, err
	}
	return p, nil
}

// Plugin implements Store.
func (s *Bolt) Plugin(ctx context.Context, name string, version int) (Plugin, error) {
	var p Plugin
	if version < 0 || version > math.MaxUint32 {
		return p, fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
	}
	err := s.view(func(tx *bolt.Tx) error {
		plugins := tx.Bucket(bucketPlugins)
		var v, vk []byte
		if version > 0 {
			vk = pluginKey(name, version)
			v = plugins.Get(vk)
		} else {
			prefix := append([]byte(name), 0)
			c := plugins.Cursor()
			for k, kv := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, kv = c.Next() {
				if len(k) == len(prefix)+4 {
					v, vk = kv, k
				}
			}
		}
		if v == nil {
			if version > 0 {
				return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
			}
			return fmt.Errorf("%w: %s", ErrPluginNotFound, name)
		}
		var err error
		p, err = decodePlugin(vk, v)
		return err
	})
	return p, err
}

// Plugins implements Store.
func (s *Bolt) Plugins(ctx context.Context) ([]Plugin, error) {
	var out []Plugin
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlugins).ForEach(func(k, v []byte) error {
			p, err := decodePlugin(k, v)
			if err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

// DeletePluginVersion implements Store.
func (s *Bolt) DeletePluginVersion(ctx context.Context, name string, version int) error {
	if version <= 0 || version > math.MaxUint32 {
		return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
	}
	return s.update(func(w *wtx) error {
		plugins := w.read(bPlugins)
		key := pluginKey(name, version)
		v := plugins.Get(key)
		if v == nil {
			return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
		}
		p, err := decodePlugin(key, v)
		if err != nil {
			return err
		}
		var inUse []string
		err = w.read(bRuns).ForEach(func(k, rv []byte) error {
			var r Run
			if err := decodeRunValue(k, rv, &r); err != nil {
				return err
			}
			if r.Plugin == name && r.Version == version && !r.Status.Terminal() {
				inUse = append(inUse, r.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return fmt.Errorf("%w: %s version %d is used by %d run(s), such as %s", ErrPluginInUse, name, version, len(inUse), inUse[0])
		}
		if err := w.del(bPlugins, key); err != nil {
			return err
		}
		shared := false
		err = plugins.ForEach(func(k, pv []byte) error {
			q, err := decodePlugin(k, pv)
			if err != nil {
				return err
			}
			if q.ModuleHash == p.ModuleHash {
				shared = true
			}
			return nil
		})
		if err != nil || shared {
			return err
		}
		return w.del(bModules, []byte(p.ModuleHash))
	})
}

// Module implements Store.
func (s *Bolt) Module(ctx context.Context, hash string) ([]byte, error) {
	return s.packed(bModules, hash, ErrModuleNotFound)
}

// decodePlugin checks and decodes a stored plugin version.
func decodePlugin(k, sv []byte) (Plugin, error) {
	return decodeJSON[Plugin](bucketPlugins, k, sv, "plugin record")
}
