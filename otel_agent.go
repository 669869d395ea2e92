package main

// The spans of agent turns (docs/operations.md "OpenTelemetry"), under the span of the
// chat wire's request (so the child of its traceparent, if any): the turn
// (invoke_agent), each model call (chat, GenAI semantic conventions: the
// provider, the model, token usage) and each tool call (execute_tool),
// with the fetch, sql and storage calls of the tool under it.

import (
	"cmp"
	"context"
	"strings"
)

// otelTurn begins the span of a turn of agent on wire.
func (h *agentHost) otelTurn(ctx context.Context, agent, wire, session string) (context.Context, *otelLive) {
	attrs := []otelAttr{otelString("gen_ai.operation.name", "invoke_agent"), otelString("gen_ai.agent.name", agent), otelString("svc.agent.wire", wire)}
	if session != "" {
		attrs = append(attrs, otelString("gen_ai.conversation.id", session))
	}
	return h.tracer.child(ctx, "invoke_agent "+agent, otelKindInternal, attrs...)
}

// otelModelCall begins the span of a model call of l.
func (l *agentLoop) otelModelCall(ctx context.Context) (context.Context, *otelLive) {
	return l.host.tracer.child(ctx, "chat", otelKindClient, otelString("gen_ai.operation.name", "chat"), otelString("gen_ai.system", l.system))
}

// otelModelDone ends the span of a model call with the model asked for
// (the provider's default, as its answer names it, when the agent names
// none), the usage and finish reason, or the failure.
func (l *agentLoop) otelModelDone(span *otelLive, resp modelResponse, err error) {
	if span == nil {
		return
	}
	model := cmp.Or(l.req.Model, resp.Model)
	span.span.Name = strings.TrimSpace("chat " + model)
	span.set(otelString("gen_ai.request.model", model))
	if err == nil {
		span.set(otelString("gen_ai.response.model", resp.Model), otelInt("gen_ai.usage.input_tokens", int64(resp.Usage.InputTokens)),
			otelInt("gen_ai.usage.output_tokens", int64(resp.Usage.OutputTokens)), otelString("gen_ai.response.finish_reasons", resp.StopReason))
	}
	span.end(err)
}

// otelToolCall begins the span of tool call c.
func (l *agentLoop) otelToolCall(ctx context.Context, c toolCall) (context.Context, *otelLive) {
	return l.host.tracer.child(ctx, "execute_tool "+c.Name, otelKindInternal, otelString("gen_ai.operation.name", "execute_tool"),
		otelString("gen_ai.tool.name", c.Name), otelString("gen_ai.tool.call.id", c.ID))
}

// otelToolTrace is what a tool's fetch, sql and storage calls are traced
// under: the tool call's span ctx carries.
func (h *agentHost) otelToolTrace(ctx context.Context) otelUserTrace {
	c, _ := otelFromContext(ctx)
	return otelUserTrace{t: h.tracer, parent: c}
}
