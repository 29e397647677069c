package storetest

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"coily.dev/coily/store"
)

func keys(t *testing.T, open func(t *testing.T) store.Shared) {
	t.Run("issued once", func(t *testing.T) { issueKeyOnce(t, open(t)) })
	t.Run("replaced with the next generation", func(t *testing.T) { replaceKeys(t, open(t)) })
}

func issueKeyOnce(t *testing.T, d store.Shared) {
	if _, err := d.Key("demo"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("absent key: %v", err)
	}
	k, err := d.IssueKey("demo", bytes.Repeat([]byte{1}, 32), time.Now())
	if err != nil || k.Generation != 1 {
		t.Fatalf("first issue: %+v %v", k, err)
	}
	if _, err := d.IssueKey("demo", bytes.Repeat([]byte{2}, 32), time.Now()); !errors.Is(err, store.ErrKeyExists) {
		t.Fatalf("second issue: %v", err)
	}
	if got, err := d.Key("demo"); err != nil || got.Secret[0] != 1 || got.Generation != 1 {
		t.Fatalf("after the second issue: %+v %v, want the first key", got, err)
	}
}

func replaceKeys(t *testing.T, d store.Shared) {
	n := byte(0)
	secret := func(string) ([]byte, error) { n++; return bytes.Repeat([]byte{n}, 32), nil }
	if _, err := d.ReplaceKeys([]string{"demo", "ci"}, secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	k, err := d.ReplaceKeys([]string{"demo"}, secret, time.Now())
	if err != nil || len(k) != 1 || k[0].Generation != 2 || k[0].Secret[0] != 3 {
		t.Fatalf("rotate: %+v %v", k, err)
	}
	if got, err := d.Key("demo"); err != nil || got.Generation != 2 || got.Secret[0] != 3 {
		t.Fatalf("demo after rotation: %+v %v", got, err)
	}
	all, err := d.Keys()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range all {
		names = append(names, k.Sandbox)
	}
	if slices.Sort(names); !slices.Equal(names, []string{"ci", "demo"}) {
		t.Fatalf("Keys lists %v, want ci and demo", names)
	}
	if _, err := d.ReplaceKeys([]string{"x"}, func(string) ([]byte, error) { return nil, errors.New("no entropy") }, time.Now()); err == nil {
		t.Fatal("a failing key source must fail the replacement")
	}
	if _, err := d.Key("x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed replacement left a key: %v", err)
	}
}
