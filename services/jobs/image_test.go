package jobs_test

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jetway/pkg/workspace"
	"jetway/services/jobs"
	"jetway/services/jobs/jobsapi"
)

// smallPNG is a real 3×2 PNG.
func smallPNG(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func (e *env) put(name string, data []byte) {
	e.t.Helper()
	p := filepath.Join(e.root, tenant, session, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func TestRead_with_images_carries_the_image_over_the_wire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	// Bind the session (and create its workspace) before writing into it.
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "notes.txt", Content: "x\n"}); err != nil {
		t.Fatal(err)
	}
	data := smallPNG(t)
	e.put("shot.png", data)
	r, err := e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: "shot.png", Images: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Image == nil || r.Image.MediaType != "image/png" || !bytes.Equal(r.Image.Data, data) || r.Image.Width != 3 || r.Image.Height != 2 {
		t.Fatalf("read = %+v", r)
	}
	// Without the option the worker answers as before.
	_, err = e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: "shot.png"})
	if ae := wantCode(t, err, jobsapi.CodeBadRequest, jobsapi.ErrBadRequest); !strings.Contains(ae.Message, "binary") {
		t.Errorf("read without images: %q", ae.Message)
	}
}

func TestAn_answer_past_the_max_payload_is_refused_not_lost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A limit past what one message carries, as a misconfigured worker has.
	e.startWorker("w1", func(c *jobs.Config) { c.Workspace.MaxImageBytes = 4 << 20 })
	if _, err := e.cli.Write(bg, tenant, session, workspace.WriteRequest{Path: "notes.txt", Content: "x\n"}); err != nil {
		t.Fatal(err)
	}
	e.put("huge.png", append(smallPNG(t), make([]byte, int(e.nc.MaxPayload()))...))
	_, err := e.cli.Read(bg, tenant, session, workspace.ReadRequest{Path: "huge.png", Images: true})
	if ae := wantCode(t, err, jobsapi.CodeConflict, jobsapi.ErrConflict); !strings.Contains(ae.Message, "max_payload") {
		t.Errorf("oversized answer: %q", ae.Message)
	}
}
