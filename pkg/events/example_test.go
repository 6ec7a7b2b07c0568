package events_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"jetway/pkg/events"
)

// A jobs worker publishes a job's end; a runner decodes it and reads the
// headline for the person and the notice for the model.
func Example() {
	subject, err := events.JobEventsSubject("acme", "s1")
	if err != nil {
		panic(err)
	}
	e, err := events.New("acme", "s1", "jetway/jobs", events.JobExited{
		ID: 3, Program: "gh", ExitStatus: 0, RunningForMS: 1265000, Tail: "all checks passed\n", Status: events.StatusExited,
	})
	if err != nil {
		panic(err)
	}
	msg, err := events.Encode(context.Background(), subject, e) // publish with JetStream
	if err != nil {
		panic(err)
	}
	fmt.Println(msg.Header.Get("ce-type"), msg.Header.Get("Nats-Msg-Id") == e.ID())

	h, err := events.DecodeMsg(msg)
	if err != nil {
		panic(err)
	}
	headline, _ := h.Headline()
	notice, _ := h.Notice()
	fmt.Println(headline)
	fmt.Println(notice)
	// Output:
	// io.jetway.job.exited true
	// job 3 (gh) exited 0 after 21m
	// [background job notice] job 3 (gh) exited 0 after 21m.
	// Last output:
	// all checks passed
	// Tell the user the result.
}

// A job event on a tenant's events subject is refused: only jobs workers,
// on jetway.jobevents.…, may say a job ended.
func ExampleDecode_forgedJobEvent() {
	h := nats.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-type", events.TypeJobExited)
	h.Set("ce-source", "somebody")
	h.Set("ce-id", "x1")
	_, err := events.Decode("jetway.events.acme.s1", h, []byte(`{"id":3,"program":"gh"}`))
	fmt.Println(errors.Is(err, events.ErrForgedJobEvent))
	// Output: true
}

func ExampleValidateToken() {
	fmt.Println(events.ValidateToken("session", "a.b"))
	// Output: session "a.b": may contain only A-Z a-z 0-9 _ -
}
