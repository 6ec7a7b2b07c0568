package guide

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"jetway/pkg/llm"
)

func TestTurn_appends_one_user_turn_and_only_when_pending(t *testing.T) {
	g := NewNoticeGuide()
	if _, _, ok := g.Turn(); ok {
		t.Fatal("nothing pending, yet a turn was made")
	}
	g.Push("ce-1", "one")
	g.Push("ce-2", "two")
	if !g.HasPending() || !g.IsPending("ce-2") || g.IsPending("ce-3") {
		t.Fatal("HasPending/IsPending wrong after Push")
	}
	turn, taken, ok := g.Turn()
	if !ok || len(taken) != 2 {
		t.Fatalf("Turn ok=%v taken=%v", ok, taken)
	}
	if turn.Role != llm.RoleUser || turn.Kind != llm.KindNotice || len(turn.Content) != 1 {
		t.Fatalf("not one notice user turn: %+v", turn)
	}
	if txt := turn.Text(); !strings.Contains(txt, "one") || !strings.Contains(txt, "two") {
		t.Errorf("turn text %q lacks the notices", txt)
	}
	if !reflect.DeepEqual(turn.Delivers, []string{"ce-1", "ce-2"}) {
		t.Errorf("Delivers = %v", turn.Delivers)
	}
	if g.HasPending() || g.IsPending("ce-1") {
		t.Error("still pending after Turn")
	}
	if got := g.TakeDelivered(); !reflect.DeepEqual(got, []Notice{{"ce-1", "one"}, {"ce-2", "two"}}) {
		t.Errorf("TakeDelivered = %v", got)
	}
	if got := g.TakeDelivered(); len(got) != 0 {
		t.Errorf("second TakeDelivered = %v, want empty", got)
	}
}

func TestReturn_puts_notices_back_in_order_before_newer_ones(t *testing.T) {
	g := NewNoticeGuide()
	g.Push("a", "A")
	g.Push("b", "B")
	_, taken, _ := g.Turn()
	g.Push("c", "C")
	g.Push("a", "A again") // redelivered meanwhile
	g.Return(taken)
	got := g.TakePending()
	want := []Notice{{"a", "A"}, {"b", "B"}, {"c", "C"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pending after Return = %v, want %v", got, want)
	}
	if d := g.TakeDelivered(); len(d) != 0 {
		t.Errorf("returned notices still count as delivered: %v", d)
	}
}

func TestPush_ignores_an_id_already_pending(t *testing.T) {
	g := NewNoticeGuide()
	g.Push("x", "first")
	g.Push("x", "again")
	if got := g.TakePending(); len(got) != 1 || got[0].Text != "first" {
		t.Fatalf("pending = %v", got)
	}
}

func TestNoticeGuide_is_safe_for_concurrent_use(t *testing.T) {
	g := NewNoticeGuide()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				g.Push(string(rune('a'+i))+string(rune('0'+j%10))+string(rune('0'+j/10)), "n")
			}
		}()
	}
	total := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		if _, taken, ok := g.Turn(); ok {
			total += len(taken)
		}
		select {
		case <-done:
			_, taken, _ := g.Turn()
			total += len(taken)
			if total != 200 {
				t.Fatalf("delivered %d notices, want 200", total)
			}
			return
		default:
		}
	}
}

func TestWithdraw_removes_only_a_notice_still_pending(t *testing.T) {
	g := NewNoticeGuide()
	g.Push("a", "old progress")
	g.Push("b", "other")
	if !g.Withdraw("a") {
		t.Fatal("a pending notice was not withdrawn")
	}
	turn, taken, ok := g.Turn()
	if !ok || len(taken) != 1 || taken[0].ID != "b" || len(turn.Delivers) != 1 {
		t.Fatalf("turn after withdraw = %+v %+v", turn, taken)
	}
	if g.Withdraw("b") {
		t.Fatal("a delivered notice was withdrawn")
	}
}
