package regularfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	if fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0); err != nil {
		t.Fatal(err)
	} else {
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, to string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exact := write("exact", "12345678")
	for _, tc := range []struct {
		name, path string
		want       string // content; "" with err set
		err        error
		says       string
	}{
		{"regular", write("ok", "hello"), "hello", nil, ""},
		{"empty", write("empty", ""), "", nil, ""},
		{"at the bound", exact, "12345678", nil, ""},
		{"over the bound", write("big", "123456789"), "", ErrTooLarge, "larger than 8 bytes"},
		{"link to a regular file", link("l-ok", exact), "12345678", nil, ""},
		{"FIFO", fifo, "", ErrNotRegular, "a FIFO"},
		{"link to a FIFO", link("l-fifo", fifo), "", ErrNotRegular, "a FIFO"},
		{"socket (the kernel refuses to open it)", sock, "", syscall.ENXIO, ""},
		{"directory", dir, "", ErrNotRegular, "a directory"},
		{"device", "/dev/null", "", ErrNotRegular, "a device"},
		{"missing", filepath.Join(dir, "none"), "", os.ErrNotExist, ""},
		{"dangling link", link("l-none", filepath.Join(dir, "none")), "", os.ErrNotExist, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var got []byte
			var err error
			go func() { defer close(done); got, err = Read(tc.path, 8) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Read(%s) blocked", tc.name)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("Read = %q, %v; want %v saying %q", got, err, tc.err, tc.says)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
