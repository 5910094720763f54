package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/store"
)

// PutPlugin implements store.Store. Versions of one name are numbered
// under an advisory lock named for it, so two hosts registering one
// plugin at once get two versions, not one version twice.
func (s *Store) PutPlugin(ctx context.Context, p store.Plugin, module []byte) (store.Plugin, error) {
	if p.Name == "" || strings.ContainsRune(p.Name, 0) {
		return store.Plugin{}, fmt.Errorf("%w: plugin name %q", store.ErrBadBatch, p.Name)
	}
	if p.ModuleHash == "" {
		return store.Plugin{}, fmt.Errorf("%w: plugin %s has no module hash", store.ErrBadBatch, p.Name)
	}
	p.Size = len(module)
	p.CreatedAt = p.CreatedAt.UTC()
	stored, z := pack(module, s.threshold)
	out := p
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sandflow plugin ' || $1::text))`, p.Name); err != nil {
			return err
		}
		var latest int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM plugins WHERE name = $1`, []byte(p.Name)).Scan(&latest); err != nil {
			return err
		}
		out = p
		out.Version = int(latest) + 1
		record, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("%w: plugin %s: %v", store.ErrBadBatch, p.Name, err)
		}
		// The module row is locked (FOR SHARE) until commit, so that a
		// DeletePluginVersion dropping the hash's last other version
		// cannot delete it under this version. If such a delete won the
		// row first, the row is gone once it commits: insert it again.
		for try := 0; ; try++ {
			if try == 10 {
				return fmt.Errorf("postgres: module %s deleted under PutPlugin 10 times", p.ModuleHash)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO modules (hash, zstd, data) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING`,
				[]byte(p.ModuleHash), z, stored); err != nil {
				return err
			}
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM modules WHERE hash = $1 FOR SHARE`, []byte(p.ModuleHash)).Scan(&one)
			if err == nil {
				break
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO plugins (name, version, module_hash, record) VALUES ($1, $2, $3, $4)`,
			[]byte(p.Name), int64(out.Version), []byte(p.ModuleHash), record)
		return err
	})
	if err != nil {
		return store.Plugin{}, err
	}
	return out, nil
}

// Plugin implements store.Store.
func (s *Store) Plugin(ctx context.Context, name string, version int) (store.Plugin, error) {
	var p store.Plugin
	if version < 0 || version > math.MaxUint32 {
		return p, fmt.Errorf("%w: %s version %d", store.ErrPluginNotFound, name, version)
	}
	err := s.read(ctx, func(c *pgx.Conn) error {
		var record []byte
		var err error
		if version > 0 {
			err = c.QueryRow(ctx, `SELECT record FROM plugins WHERE name = $1 AND version = $2`, []byte(name), int64(version)).Scan(&record)
		} else {
			err = c.QueryRow(ctx, `SELECT record FROM plugins WHERE name = $1 ORDER BY version DESC LIMIT 1`, []byte(name)).Scan(&record)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			if version > 0 {
				return fmt.Errorf("%w: %s version %d", store.ErrPluginNotFound, name, version)
			}
			return fmt.Errorf("%w: %s", store.ErrPluginNotFound, name)
		}
		if err != nil {
			return err
		}
		return decodePlugin(record, &p)
	})
	return p, err
}

func decodePlugin(record []byte, p *store.Plugin) error {
	*p = store.Plugin{}
	if err := json.Unmarshal(record, p); err != nil {
		return fmt.Errorf("%w: plugin: %v", store.ErrCorrupt, err)
	}
	return nil
}

// Plugins implements store.Store.
func (s *Store) Plugins(ctx context.Context) ([]store.Plugin, error) {
	var out []store.Plugin
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, `SELECT record FROM plugins ORDER BY name, version`)
		if err != nil {
			return err
		}
		var record []byte
		_, err = pgx.ForEachRow(rows, []any{&record}, func() error {
			var p store.Plugin
			if err := decodePlugin(record, &p); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
		return err
	})
	return out, err
}

// Module implements store.Store.
func (s *Store) Module(ctx context.Context, hash string) ([]byte, error) {
	var out []byte
	err := s.read(ctx, func(c *pgx.Conn) error {
		var data []byte
		var z bool
		err := c.QueryRow(ctx, `SELECT zstd, data FROM modules WHERE hash = $1`, []byte(hash)).Scan(&z, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrModuleNotFound, hash)
		}
		if err != nil {
			return err
		}
		out, err = unpack(data, z)
		if err != nil {
			return fmt.Errorf("module %s: %w", hash, err)
		}
		return nil
	})
	return out, err
}

// DeletePluginVersion implements store.Store.
//
// A run created by another host while this runs, pinned to the version,
// is not seen: CreateRun does not look at plugins. The host checks a
// version exists before it starts a run on it, so such a run needs a
// delete and a start of the same version at the same instant.
func (s *Store) DeletePluginVersion(ctx context.Context, name string, version int) error {
	if version <= 0 || version > math.MaxUint32 {
		return fmt.Errorf("%w: %s version %d", store.ErrPluginNotFound, name, version)
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		var hash []byte
		err := tx.QueryRow(ctx, `SELECT module_hash FROM plugins WHERE name = $1 AND version = $2 FOR UPDATE`, []byte(name), int64(version)).Scan(&hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s version %d", store.ErrPluginNotFound, name, version)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM runs WHERE plugin = $1 AND version = $2
AND status NOT IN ('completed', 'failed', 'cancelled') ORDER BY id`, []byte(name), int64(version))
		if err != nil {
			return err
		}
		inUse, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return fmt.Errorf("%w: %s version %d is used by %d run(s), such as %s", store.ErrPluginInUse, name, version, len(inUse), inUse[0])
		}
		if _, err := tx.Exec(ctx, `DELETE FROM plugins WHERE name = $1 AND version = $2`, []byte(name), int64(version)); err != nil {
			return err
		}
		// Locked first, counted after: a PutPlugin sharing the hash has
		// committed its version by the time the lock is had, and the
		// count (a new statement, a new snapshot) sees it.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM modules WHERE hash = $1 FOR UPDATE`, hash); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM modules WHERE hash = $1 AND NOT EXISTS (SELECT 1 FROM plugins WHERE module_hash = $1)`, hash)
		return err
	})
}
