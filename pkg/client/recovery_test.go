package client

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"jetway/pkg/auth"
	"jetway/pkg/bus"
	"jetway/pkg/bus/bustest"
	"jetway/services/dispatcher"
)

// newDispatcherClient serves a real dispatcher on a real JetStream server
// and returns a client with token: jw_user may do anything in tenant
// "default", jw_ci may only publish com.github.* events there.
func newDispatcherClient(t *testing.T, token string) *Client {
	t.Helper()
	_, nc, _ := bustest.StartProvisioned(t, bus.ProvisionConfig{Partitions: 1})
	store, err := auth.New(
		auth.Grant{Token: "jw_user", Tenant: "default"},
		auth.Grant{Token: "jw_ci", Tenant: "default", EventTypes: []string{"com.github.*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{Conn: nc, Auth: store, RatePerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRecovery_set_read_and_clear_against_a_real_dispatcher(t *testing.T) {
	c := newDispatcherClient(t, "jw_user")
	ctx := ctxT(t)
	r, err := c.Recovery(ctx, "s1")
	if err != nil || r.Override != nil || r.Effective != (RecoverySettings{Policy: "automatic", MaxAttempts: 3}) {
		t.Fatalf("before: %+v (%v), want the defaults", r, err)
	}
	manual, two := "manual", 2
	r, err = c.SetRecovery(ctx, "s1", RecoveryOverride{Policy: &manual, MaxAttempts: &two})
	if err != nil || r.Effective != (RecoverySettings{Policy: "manual", MaxAttempts: 2}) || r.Revision == 0 {
		t.Fatalf("set: %+v (%v)", r, err)
	}
	r, err = c.SetRecovery(ctx, "s1", RecoveryOverride{MaxAttempts: &two})
	if err != nil || r.Override == nil || r.Override.Policy != nil || r.Effective.Policy != "automatic" {
		t.Fatalf("set attempts only: %+v (%v)", r, err)
	}
	got, err := c.Recovery(ctx, "s1")
	if err != nil || got.Revision != r.Revision || got.Effective != r.Effective {
		t.Fatalf("read back %+v (%v), want %+v", got, err, r)
	}
	r, err = c.ClearRecovery(ctx, "s1")
	if err != nil || r.Override != nil || r.Effective.MaxAttempts != 3 {
		t.Fatalf("clear: %+v (%v)", r, err)
	}
}

func TestSetRecovery_refusals_carry_the_dispatchers_detail(t *testing.T) {
	c := newDispatcherClient(t, "jw_user")
	bad := "sometimes"
	_, err := c.SetRecovery(ctxT(t), "s1", RecoveryOverride{Policy: &bad})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), `"never"`) {
		t.Fatalf("error = %v, want a 400 naming the allowed policies", err)
	}

	ci := newDispatcherClient(t, "jw_ci")
	_, err = ci.ClearRecovery(ctxT(t), "s1")
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("error = %v, want a 403 for a token that may not steer", err)
	}
}
