package jobtools_test

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"jetway/pkg/llm"
	"jetway/pkg/workspace"
	"jetway/services/jobs/jobtools"
)

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(x), uint8(y), 200, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// put writes a file into acme/s1's workspace under root.
func put(t *testing.T, root, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(root, "acme", "s1", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRead_file_returns_a_png_as_an_image_with_one_line(t *testing.T) {
	reg, _, root := setupRoot(t)
	data := pngOf(t, 40, 30)
	put(t, root, "pics/shot.png", data)
	res := call(t, reg, "read_file", map[string]any{"path": "pics/shot.png"})
	want := "pics/shot.png: PNG image, 40×30, " + workspace.SizeText(int64(len(data)))
	if res.IsError || res.Content != want {
		t.Errorf("content = %q (error %v), want %q", res.Content, res.IsError, want)
	}
	if len(res.Images) != 1 {
		t.Fatalf("images = %d, want 1", len(res.Images))
	}
	img := res.Images[0]
	if img.MediaType != "image/png" || img.Data != base64.StdEncoding.EncodeToString(data) || img.URL != "" {
		t.Errorf("image = %s, %d chars of base64, url %q", img.MediaType, len(img.Data), img.URL)
	}
	// What a provider checks before sending, it accepts.
	if err := (llm.ImagePolicy{MediaTypes: workspace.ImageTypes, MaxDimension: 8000}).Check(img); err != nil {
		t.Errorf("the image does not pass a provider's policy: %v", err)
	}
}

func TestRead_file_of_a_text_file_named_png_is_text(t *testing.T) {
	reg, _, root := setupRoot(t)
	put(t, root, "fake.png", []byte("not a picture\nreally\n"))
	res := call(t, reg, "read_file", map[string]any{"path": "fake.png"})
	if res.IsError || len(res.Images) != 0 || res.Content != "     1\tnot a picture\n     2\treally" {
		t.Errorf("read = %+v", res)
	}
}

func TestRead_file_refuses_an_image_over_the_limit_and_says_how_to_fix_it(t *testing.T) {
	reg, _, root := setupRoot(t)
	// A PNG with trailing bytes: still a PNG by its bytes, bigger than 512 KiB.
	data := append(pngOf(t, 8, 8), make([]byte, workspace.DefaultMaxImageBytes)...)
	put(t, root, "big.png", data)
	res := call(t, reg, "read_file", map[string]any{"path": "big.png"})
	if !res.IsError || len(res.Images) != 0 {
		t.Fatalf("read = %q (error %v, %d images), want a refusal", res.Content, res.IsError, len(res.Images))
	}
	for _, want := range []string{"big.png", workspace.SizeText(int64(len(data))), "512 KB (524288 bytes)", "export a smaller version"} {
		if !strings.Contains(res.Content, want) {
			t.Errorf("refusal %q does not say %q", res.Content, want)
		}
	}
}

func TestRead_file_refuses_a_symlink_to_an_image_outside(t *testing.T) {
	reg, _, root := setupRoot(t)
	outside := filepath.Join(t.TempDir(), "secret.png")
	if err := os.WriteFile(outside, pngOf(t, 4, 4), 0o644); err != nil {
		t.Fatal(err)
	}
	link := put(t, root, "placeholder", nil)
	if err := os.Symlink(outside, filepath.Join(filepath.Dir(link), "link.png")); err != nil {
		t.Fatal(err)
	}
	res := call(t, reg, "read_file", map[string]any{"path": "link.png"})
	if !res.IsError || len(res.Images) != 0 || !strings.Contains(res.Content, "outside the workspace") {
		t.Errorf("read through the link = %q (error %v, %d images)", res.Content, res.IsError, len(res.Images))
	}
}

func TestRead_file_description_tells_the_model_it_can_read_images(t *testing.T) {
	var d string
	for _, tl := range jobtools.Tools(nil, "acme", "s1", "r1", "") {
		if tl.Spec().Name == "read_file" {
			d = tl.Spec().Description
		}
	}
	if !strings.Contains(d, "PNG, JPEG, GIF or WebP image") || !strings.Contains(d, "512 KB") {
		t.Errorf("description = %q", d)
	}
}
