package main

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestEvery_service_connects_with_its_own_inbox_prefix_unless_told_otherwise(t *testing.T) {
	for _, svc := range []string{"dispatcher", "runner", "jobs", "notifier"} {
		var nf natsFlags
		fs := pflag.NewFlagSet(svc, pflag.ContinueOnError)
		nf.register(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if got := nf.config(svc, "jetway-"+svc).InboxPrefix; got != "_INBOX_"+svc {
			t.Errorf("%s: inbox prefix %q, want _INBOX_%s (deploy/nats lets its user read only that)", svc, got, svc)
		}
	}
	var nf natsFlags
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	nf.register(fs)
	if err := fs.Parse([]string{"--nats-inbox-prefix", "_INBOX_runner_b"}); err != nil {
		t.Fatal(err)
	}
	if got := nf.config("runner", "r").InboxPrefix; got != "_INBOX_runner_b" {
		t.Errorf("--nats-inbox-prefix ignored: %q", got)
	}
}
