package agent_test

import (
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"jetway/pkg/agent"
	"jetway/pkg/llm"
)

func TestQuery_traces_each_model_call_and_tool_call(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(t.Context()) })

	m := newModel(reply{tools: []llm.ContentBlock{call("1", "echo", "")}, usage: llm.Usage{InputTokens: 9, OutputTokens: 4}}, reply{text: "ok"})
	_, term := run(t, t.Context(), agent.QueryInput{Provider: m, Model: "m1", Messages: userInput("hi"), Tools: registry(t, echo())}, agent.QueryDeps{})
	if term.Reason != agent.ReasonCompleted {
		t.Fatalf("terminal %+v", term)
	}
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if len(byName["agent.query"]) != 1 || len(byName["agent.model_call"]) != 2 || len(byName["tool echo"]) != 1 {
		t.Fatalf("spans %v", byName)
	}
	q := byName["agent.query"][0]
	for _, s := range append(byName["agent.model_call"], byName["tool echo"]...) {
		if s.Parent().SpanID() != q.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the query span", s.Name())
		}
	}
	attrs := map[string]string{}
	for _, a := range byName["agent.model_call"][0].Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["agent.model"] != "m1" || attrs["agent.stop_reason"] != "tool_use" || attrs["agent.output_tokens"] != "4" {
		t.Errorf("model call attributes %v", attrs)
	}
}
