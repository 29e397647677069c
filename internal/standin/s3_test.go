package standin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var s3Buckets = map[string][]string{
	"alpha": {"a.txt", "dir/b.txt", "dir/c d.txt"},
	"beta":  nil,
}

func TestS3AWSCLIListsBucketsAndKeys(t *testing.T) {
	aws := Need(t, AWSPath, AWSHint)
	s := S3(t, "AKIDSTANDIN", "standin-secret-1", s3Buckets)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests: %q", s.Requests())
		}
	})
	env := s.Env(t)

	out := run(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls")
	if !strings.Contains(out, "2024-01-02 03:04:05 alpha\n") || !strings.Contains(out, " beta\n") {
		t.Fatalf("aws s3 ls printed %q, want both buckets", out)
	}
	out = run(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls", "s3://alpha/")
	if !strings.Contains(out, "PRE dir/\n") || !strings.Contains(out, " 5 a.txt\n") || strings.Contains(out, "b.txt") {
		t.Fatalf("aws s3 ls s3://alpha/ printed %q, want a.txt and dir/ only", out)
	}
	out = run(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls", "s3://alpha/dir/")
	if !strings.Contains(out, " b.txt\n") || !strings.Contains(out, " c d.txt\n") {
		t.Fatalf("aws s3 ls s3://alpha/dir/ printed %q", out)
	}
	// A prefix the CLI must escape in the query still verifies.
	if out, err := tryRun(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls", "s3://alpha/dir/c d+~*"); err == nil || strings.Contains(out, "b.txt") {
		t.Fatalf("aws s3 ls of a prefix nothing has: %v %q", err, out)
	}
	if out, err := tryRun(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls", "s3://gamma/"); err == nil || !strings.Contains(out, "NoSuchBucket") {
		t.Fatalf("aws s3 ls of a missing bucket: %v %q", err, out)
	}
	want := []string{
		"GET / ListBuckets",
		"GET /alpha ListObjectsV2 prefix= delimiter=/",
		"GET /alpha ListObjectsV2 prefix=dir/ delimiter=/",
		"GET /alpha ListObjectsV2 prefix=dir/c d+~* delimiter=/",
		"GET /gamma ListObjectsV2 prefix= delimiter=/",
	}
	if got := s.Requests(); !slices.Equal(got, want) {
		t.Fatalf("requests = %q, want %q", got, want)
	}
}

func TestS3RefusesWrongCredentials(t *testing.T) {
	aws := Need(t, AWSPath, AWSHint)
	const secret = "standin-secret-1"
	s := S3(t, "AKIDSTANDIN", secret, s3Buckets)
	for _, tc := range []struct {
		name, key, secret, code string
	}{
		{"wrong secret", "AKIDSTANDIN", "wrong-secret-2", "SignatureDoesNotMatch"},
		{"other access key", "AKIDOTHER", secret, "InvalidAccessKeyId"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(s.Env(t), "AWS_ACCESS_KEY_ID="+tc.key, "AWS_SECRET_ACCESS_KEY="+tc.secret)
			before := len(s.Requests())
			out, err := tryRun(t, "", env, aws, "--endpoint-url", s.URL, "s3", "ls")
			if err == nil || !strings.Contains(out, tc.code) {
				t.Fatalf("aws s3 ls with %s: err %v, output %q", tc.name, err, out)
			}
			if strings.Contains(out, secret) || strings.Contains(out, tc.secret) || strings.Contains(out, "alpha") {
				t.Fatalf("the output shows a secret or a bucket: %q", out)
			}
			reqs := s.Requests()[before:]
			if len(reqs) == 0 {
				t.Fatal("no request reached the stand-in")
			}
			for _, r := range reqs {
				if !strings.HasPrefix(r, "403 GET / "+tc.code) || strings.Contains(r, tc.secret) {
					t.Errorf("request %q was not refused with %s", r, tc.code)
				}
			}
		})
	}
}

func TestS3AWSCLICopiesUpAndDown(t *testing.T) {
	aws := Need(t, AWSPath, AWSHint)
	s := S3(t, "AKIDSTANDIN", "standin-secret-1", s3Buckets)
	env := s.Env(t)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "up.txt"), filepath.Join(dir, "down.txt")
	if err := os.WriteFile(src, []byte("hello from the stand-in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "", env, aws, "--endpoint-url", s.URL, "s3", "cp", src, "s3://alpha/up.txt")
	if got, ok := s.Object("alpha", "up.txt"); !ok || string(got) != "hello from the stand-in\n" {
		t.Fatalf("stored %q, %v", got, ok)
	}
	run(t, "", env, aws, "--endpoint-url", s.URL, "s3", "cp", "s3://alpha/up.txt", dst)
	if got, err := os.ReadFile(dst); err != nil || string(got) != "hello from the stand-in\n" {
		t.Fatalf("downloaded %q, %v", got, err)
	}
	if _, err := tryRun(t, "", env, aws, "--endpoint-url", s.URL, "s3", "cp", src, "s3://gamma/up.txt"); err == nil {
		t.Fatal("a put to a missing bucket succeeded")
	}
	// awscli 2.9 sends a small upload unsigned (HTTPS, with Content-MD5),
	// never aws-chunked: what the egress proxy can re-sign.
	want := []string{"PUT /alpha/up.txt PutObject 24 bytes payload=UNSIGNED-PAYLOAD", "HEAD /alpha/up.txt HeadObject",
		"GET /alpha/up.txt GetObject", "404 PUT /gamma/up.txt NoSuchBucket"}
	if got := s.Requests(); !slices.Equal(got, want) {
		t.Fatalf("requests = %q, want %q", got, want)
	}
}
