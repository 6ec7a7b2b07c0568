package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"jetway/internal/testutil"
	"jetway/pkg/bus"
	api "jetway/pkg/dispatcherapi"
)

func TestCluster_and_the_console_are_in_the_OpenAPI_document(t *testing.T) {
	for _, path := range []string{"/v1/cluster:", "/:"} {
		if !bytes.Contains(OpenAPI, []byte("\n  "+path+"\n")) {
			t.Errorf("OpenAPI document lacks path %s", path)
		}
	}
}

func TestCluster_shows_operators_runners_partitions_and_consumer_lag_and_refuses_tenants(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	runners, err := f.js.KeyValue(ctx, bus.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	beat, _ := json.Marshal(map[string]any{"incarnation": "i1", "started": time.Now(), "partitions": []int{0}})
	if _, err := runners.Put(ctx, "r1", beat); err != nil {
		t.Fatal(err)
	}
	// One event waits in the work queue: partition 0's lag.
	if _, err := f.js.Publish(ctx, "jetway.events.default.s1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	// The work stream sources the event a moment after it is stored.
	var c Cluster
	testutil.Eventually(t, waitFor, "partition 0 to show the waiting event", func() bool {
		c = decode[Cluster](t, f.do("GET", "/v1/cluster", tokOperator, nil), http.StatusOK)
		return len(c.Partitions) == 1 && c.Partitions[0].Pending == 1
	})
	if len(c.Runners) != 1 || c.Runners[0].ID != "r1" || c.Runners[0].Stale || len(c.Runners[0].Partitions) != 1 {
		t.Errorf("runners %+v, want r1 holding partition 0, fresh", c.Runners)
	}
	if len(c.Partitions) != 1 || c.Partitions[0].Pending != 1 {
		t.Errorf("partitions %+v, want partition 0 with 1 event waiting", c.Partitions)
	}
	found := false
	for _, s := range c.Streams {
		found = found || s.Name == bus.WorkStream(0)
	}
	if !found || len(c.Consumers) == 0 || len(c.Errors) != 0 {
		t.Errorf("streams %+v consumers %+v errors %v", c.Streams, c.Consumers, c.Errors)
	}

	for _, tok := range []string{tokUser, tokAdmin} {
		p := problemOf(t, f.do("GET", "/v1/cluster", tok, nil), http.StatusForbidden)
		if p.Detail == "" {
			t.Errorf("a tenant token's refusal says nothing")
		}
	}

	// The NATS API answers the same to an operator.
	if _, err := f.d.StartNATS(); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(api.SubjectCluster)
	msg.Header.Set("Authorization", "Bearer "+tokOperator)
	reply, err := f.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	var nc Cluster
	if err := json.Unmarshal(reply.Data, &nc); err != nil || len(nc.Partitions) != 1 {
		t.Fatalf("NATS cluster answer %s: %v", reply.Data, err)
	}
}

func TestConsole_is_served_at_the_root_without_a_token_and_the_API_still_needs_one(t *testing.T) {
	f := newFixture(t)
	for path, ctype := range map[string]string{"/": "text/html; charset=utf-8", "/console/console.js": "text/javascript; charset=utf-8"} {
		resp := f.do("GET", path, "", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ctype ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("GET %s: %d %q CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
		}
	}
	problemOf(t, f.do("GET", "/v1/sessions", "", nil), http.StatusUnauthorized)
	problemOf(t, f.do("GET", "/nothing-here", "", nil), http.StatusNotFound)
}
