package tasks

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"jetway/internal/testutil"
	"jetway/pkg/redact"
)

func TestOutput_of_a_burst_reaches_the_file_while_the_command_is_quiet(t *testing.T) {
	// A burst far larger than one batch, then silence: every line of it,
	// the last included, must be readable while the command still runs,
	// not only once it ends.
	m := newManager(t)
	gate := filepath.Join(t.TempDir(), "gate")
	info := startSh(t, m, `yes 'burst line' | head -n 100000; echo last; while [ ! -e `+gate+` ]; do sleep 0.01; done`)
	t.Cleanup(func() { os.WriteFile(gate, nil, 0o644) })
	testutil.Eventually(t, 10*time.Second, "the whole burst in the file", func() bool {
		_, total, _, _ := ReadLines(info.Path, 1, 0)
		return total == 100001
	})
	lines, _, _, err := ReadLines(info.Path, 100001, 1)
	if err != nil || len(lines) != 1 || lines[0] != "last" {
		t.Errorf("last line = %q, %v", lines, err)
	}
	cur, err := m.Get(sid, info.ID)
	if err != nil || cur.Status != Running || cur.Lines != 100001 || TailText(cur, 2) != "burst line\nlast" {
		t.Errorf("snapshot while quiet: %+v, %v", cur, err)
	}
}

func TestOutput_tail_is_the_last_lines_whatever_the_batches(t *testing.T) {
	// The tail is brought up to date once per batch; it must be what
	// line-by-line bookkeeping would keep: the last 20 lines, each cut to
	// 4 KiB, and at most 4 KiB in all unless one line is all there is.
	var all []string
	for i := range 60 {
		all = append(all, fmt.Sprintf("line %d %s", i, strings.Repeat("x", (i*397)%900)))
	}
	all = append(all, strings.Repeat("y", tailBytes+100), "short", "")
	want := func(lines []string) []string {
		var tail []string
		size := 0
		for _, l := range lines {
			if len(l) > tailBytes {
				l = l[:tailBytes]
			}
			tail = append(tail, l)
			size += len(l)
			for len(tail) > tailLines || (size > tailBytes && len(tail) > 1) {
				size -= len(tail[0])
				tail = tail[1:]
			}
		}
		return tail
	}
	for _, chunk := range []int{1, 7, 100, 5000, 1 << 20} {
		f, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutput(f, nil, 0)
		text := []byte(strings.Join(all, "\n") + "\n")
		for len(text) > 0 {
			k := min(chunk, len(text))
			o.Write(text[:k])
			text = text[k:]
		}
		if got := o.stats().tail; !slices.Equal(got, want(all)) {
			t.Errorf("chunks of %d: tail = %d lines %q…, want %d lines", chunk, len(got), got[:min(2, len(got))], len(want(all)))
		}
		o.close()
	}
}

func TestSpares_give_empty_distinct_files_and_leave_nothing_else(t *testing.T) {
	dir := t.TempDir()
	var s spares
	var names []string
	for i := range 5 {
		path := filepath.Join(dir, fmt.Sprintf("%d.out", i))
		f, err := s.create(path)
		if err != nil {
			t.Fatalf("create %s: %v", path, err)
		}
		fmt.Fprintf(f, "file %d\n", i)
		f.Close()
		names = append(names, filepath.Base(path))
		// Let the refill run, so later creates take spares.
		testutil.Eventually(t, 10*time.Second, "spares made", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return !s.filling
		})
		s.mu.Lock()
		ready := len(s.ready)
		s.mu.Unlock()
		if ready != spareCount {
			t.Fatalf("%d spares ready after a refill, want %d", ready, spareCount)
		}
	}
	s.close()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Errorf("directory holds %q, want only %q", got, names)
	}
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if want := fmt.Sprintf("file %d\n", i); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", n, b, err, want)
		}
	}
}

func TestOutput_blocks_copied_whole_match_line_by_line_cleaning(t *testing.T) {
	// The block path (Config.Unchanged) must write what cleaning line by
	// line writes, whatever the lines and however they are cut into writes:
	// ordinary lines, lines to clean or redact, lines past maxLine, and an
	// output limit reached midway.
	r := rand.New(rand.NewPCG(21, 22))
	kinds := []func() string{
		func() string { return "the quick brown fox jumps over the lazy dog" },
		func() string { return fmt.Sprintf("line %d ok", r.IntN(1000)) },
		func() string { return "\x1b[1;31mred\x1b[0m and \r\n" },
		func() string { return "GITHUB_TOKEN=abc123 password: x" },
		func() string { return "" },
		func() string { return strings.Repeat("y", maxLine+r.IntN(100)) },
		func() string { return strings.Repeat("z ", r.IntN(40000)) },
		func() string { return "caf\xe9" },
	}
	ordinary := strings.Repeat("an ordinary line\n", 500)
	fixed := []struct {
		text  string
		limit int64
	}{
		{ordinary, 4000}, // the limit inside a clean block
		{ordinary + strings.Repeat("z ", 40000) + "\n" + ordinary, 0}, // a clean line past maxLine
	}
	for round := range 30 + len(fixed) {
		var b strings.Builder
		for range r.IntN(60) + 1 {
			b.WriteString(kinds[r.IntN(len(kinds))]())
			b.WriteByte('\n')
		}
		if r.IntN(2) == 0 {
			b.WriteString("no newline at the end")
		}
		text := []byte(b.String())
		limit := int64(0)
		if round%3 == 0 {
			limit = int64(r.IntN(len(text) + 1))
		}
		whole := false
		if round >= 30 {
			text, limit, whole = []byte(fixed[round-30].text), fixed[round-30].limit, true
		}
		var files [2]string
		var stats [2]outStats
		for k := range 2 {
			f, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			o := newOutput(f, redact.AppendCleanLine, limit)
			if k == 1 {
				o.unchanged = redact.Unchanged
			}
			for p := text; len(p) > 0; {
				n := min(len(p), 1+r.IntN(200000))
				if whole {
					n = len(p)
				}
				o.Write(p[:n])
				p = p[n:]
			}
			stats[k] = o.stats()
			o.close()
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			files[k] = string(b)
		}
		if files[0] != files[1] {
			t.Fatalf("round %d (limit %d): the block path wrote %d bytes, line by line %d", round, limit, len(files[1]), len(files[0]))
		}
		if !reflect.DeepEqual(stats[0], stats[1]) {
			t.Fatalf("round %d: stats differ:\nline by line %+v\nblocks       %+v", round, stats[0].lines, stats[1].lines)
		}
	}
}
