package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// TestEtcdAuth: with etcd's users on, a host opens with its user and
// password and works under the prefix its role may read and write; a
// wrong password, or a prefix outside its role, does not open.
func TestEtcdAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := raw(t)
	steps := []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "team"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "team", "/coily-auth/", clientv3.GetPrefixRangeEnd("/coily-auth/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "host1", "host1-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "host1", "team"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Username: "root", Password: "root-password", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			defer root.Close()
			if _, err := root.AuthDisable(ctx); err != nil {
				t.Errorf("auth disable: %v", err)
			}
		}
		admin.UserDelete(ctx, "host1")
		admin.UserDelete(ctx, "root")
		admin.RoleDelete(ctx, "team")
	})
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	cfg := etcdstore.Config{Username: "host1", Password: "host1-password", Prefix: "/coily-auth" + prefix(t), CallTimeout: 3 * time.Second}
	s := openCfg(t, cfg)
	if ok, _, err := s.Take("k", store.Rate{PerMinute: 1, Burst: 1}, time.Now()); !ok || err != nil {
		t.Fatalf("Take as host1: %v %v", ok, err)
	}
	if _, _, err := s.AcceptRelay(relay("id", "sb"), "n", time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("AcceptRelay as host1: %v", err)
	}
	for name, c := range map[string]etcdstore.Config{
		"wrong password": {Username: "host1", Password: "nope", Prefix: cfg.Prefix},
		"another prefix": {Username: "host1", Password: "host1-password", Prefix: "/coily-other/"},
	} {
		c.Endpoints, c.TLS, c.SealKey, c.CallTimeout = cluster.Endpoints(), cluster.ClientTLS(), sealKey, 3*time.Second
		if s, err := etcdstore.Open(context.Background(), c); err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
		}
	}
}

// TestEtcdAuditReaderRole: the role docs/scale.md gives a reader of the
// fleet's audit view (read on <prefix>audit/ and <prefix>audithosts/,
// nothing else) is enough for `coily audit tail --fleet` (an AuditOnly
// store opens, tails and follows), and writes nothing: a stop key can be
// neither written nor read, nor a record forged.
func TestEtcdAuditReaderRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pre := "/coily-auth" + prefix(t)
	lines := shipLines(t, "a", 4)
	if err := ship(t, openCfg(t, etcdstore.Config{Prefix: pre}), "a", lines[:3]); err != nil {
		t.Fatal(err)
	}
	admin := raw(t)
	read := func(dir string) func() error {
		return func() error {
			_, err := admin.RoleGrantPermission(ctx, "auditor", pre+dir, clientv3.GetPrefixRangeEnd(pre+dir), clientv3.PermissionType(clientv3.PermRead))
			return err
		}
	}
	steps := []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "auditor"); return err },
		read("audit/"),
		read("audithosts/"),
		func() error { _, err := admin.UserAdd(ctx, "reader", "reader-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "reader", "auditor"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "host"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "host", pre, clientv3.GetPrefixRangeEnd(pre), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "host1", "host1-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "host1", "host"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Username: "root", Password: "root-password", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			defer root.Close()
			if _, err := root.AuthDisable(ctx); err != nil {
				t.Errorf("auth disable: %v", err)
			}
		}
		admin.UserDelete(ctx, "reader")
		admin.UserDelete(ctx, "host1")
		admin.UserDelete(ctx, "root")
		admin.RoleDelete(ctx, "auditor")
		admin.RoleDelete(ctx, "host")
	})
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	s, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Prefix: pre,
		Username: "reader", Password: "reader-password", AuditOnly: true, CallTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("open as the reader: %v", err)
	}
	defer s.Close()
	v, err := s.AuditTail(ctx, 10, nil)
	if err != nil || len(v.Records) != 3 {
		t.Fatalf("tail as the reader: %d records, %v", len(v.Records), err)
	}
	// The reader's token made stale (a password set again drops every
	// token of the user) before the watch opens: clientv3 renews a token
	// for a unary call, not for a watch, which failed "invalid auth
	// token" at once (and sometimes did when a member had not applied
	// a fresh token yet).
	staleTokens(t, "reader", "reader-password")
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := s.WatchAudit(wctx, v.Rev+1)

	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Username: "reader", Password: "reader-password", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for what, op := range map[string]clientv3.Op{
		"write the lockout":  clientv3.OpPut(pre+"stops/lockout", `{"active":false}`),
		"delete the lockout": clientv3.OpDelete(pre + "stops/lockout"),
		"read the lockout":   clientv3.OpGet(pre + "stops/lockout"),
		"forge a record":     clientv3.OpPut(fmt.Sprintf("%saudit/a/%020d", pre, 4), "{}"),
		"read a key":         clientv3.OpGet(pre+"keys/", clientv3.WithPrefix()),
	} {
		if _, err := cli.Do(ctx, op); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("the reader may %s: %v, want permission denied", what, err)
		}
	}
	// A host ships on: the reader follows.
	host := openCfg(t, etcdstore.Config{Prefix: pre, Username: "host1", Password: "host1-password", CallTimeout: 3 * time.Second})
	if err := ship(t, host, "a", lines[3:]); err != nil {
		t.Fatal(err)
	}
	if ev := <-watch; ev.Err != nil || ev.Record.Seq != 4 {
		t.Fatalf("the reader's watch: %+v, want record 4", ev)
	}

	// The same for a host's watch of the stop controls.
	_, rev, err := host.StopsAt()
	if err != nil {
		t.Fatal(err)
	}
	staleTokens(t, "host1", "host1-password")
	stops := host.Watch(wctx, rev+1)
	if err := openCfg(t, etcdstore.Config{Prefix: pre, Username: "host1", Password: "host1-password", CallTimeout: 3 * time.Second}).
		SetPause(store.Stop{Active: true, By: "test", Reason: "a stale token"}); err != nil {
		t.Fatal(err)
	}
	if ev := <-stops; ev.Err != nil || !ev.Stops.Pause.Active {
		t.Fatalf("the host's watch of the stops: %+v, want the pause", ev)
	}
}

// staleTokens drops every auth token of user by setting its password
// again, as root.
func staleTokens(t *testing.T, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Username: "root", Password: "root-password", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.UserChangePassword(ctx, user, password); err != nil {
		t.Fatal(err)
	}
}
