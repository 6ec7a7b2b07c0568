package tasks

import (
	"fmt"
	"os/exec"
	"testing"

	"jetway/pkg/redact"
)

// benchOutputLine is an ordinary 100-byte line (99 bytes and its newline),
// what the jobs bench writes.
const benchOutputLine = "the quick brown fox jumps over the lazy dog while the build prints another ordinary line of output"

// BenchmarkCapture measures a command's output going through the manager to
// its file, cleaned by redact.AppendCleanLine (and redact.Unchanged) as the
// jobs worker does it: ordinary lines, and the same with one coloured line
// in every hundred.
func BenchmarkCapture(b *testing.B) {
	b.Run("ordinary", func(b *testing.B) {
		benchCapture(b, fmt.Sprintf("yes '%s'", benchOutputLine))
	})
	b.Run("one_in_100_coloured", func(b *testing.B) {
		benchCapture(b, fmt.Sprintf(`yes '%s' | awk 'NR %% 100 == 0 { printf "\033[1;31m%%s\033[0m\n", $0; next } { print }'`, benchOutputLine))
	})
}

func benchCapture(b *testing.B, source string) {
	const size = 64 << 20
	m := NewManager(Config{
		Output:      Files{Dir: b.TempDir()}.Output,
		AppendClean: redact.AppendCleanLine,
		Unchanged:   redact.Unchanged,
		Limits:      Limits{MaxOutputBytes: 2 * size},
	})
	b.Cleanup(m.Close)
	b.SetBytes(size)
	for b.Loop() {
		cmd := exec.Command("sh", "-c", fmt.Sprintf("%s | head -c %d", source, size))
		info, err := m.Start(bg, Spec{Summary: "yes", Cmd: cmd})
		if err != nil {
			b.Fatal(err)
		}
		if _, out, err := m.Wait(bg, sid, info.ID, 0); err != nil || out != WaitEnded {
			for out != WaitEnded {
				_, out, err = m.Wait(bg, sid, info.ID, 1<<40)
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkStart measures Manager.Start of /bin/true returning the id.
func BenchmarkStart(b *testing.B) {
	m := NewManager(Config{Output: Files{Dir: b.TempDir()}.Output, AppendClean: redact.AppendCleanLine})
	b.Cleanup(m.Close)
	for b.Loop() {
		info, err := m.Start(bg, Spec{Summary: "true", Cmd: exec.Command("true")})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, _, err := m.Wait(bg, sid, info.ID, 1<<40); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
