package etcdstore_test

import (
	"context"
	"testing"
	"time"

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
