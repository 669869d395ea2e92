package main

import (
	"context"
	"sync"
	"testing"
)

// TestProviderPoolAtConcurrency sends rounds of 32 concurrent model calls
// through the runtime's provider client, as 32 concurrent chats do, and
// checks that the provider saw about 32 connections, not one per call:
// http.DefaultTransport kept two idle connections per host, so each round
// opened about 30 new ones.
func TestProviderPoolAtConcurrency(t *testing.T) {
	fake := newFakeProvider(t)
	host := newAgentHost(&runtimeCore{log: discardLogger()})
	model := host.models(&modelProvider{Kind: providerOpenAI, APIKey: "sk-test", BaseURL: fake.URL + "/v1"})
	const clients, rounds = 32, 10
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var onDelta func(modelDelta)
				if round%2 == 1 { // streamed answers too
					onDelta = func(modelDelta) {}
				}
				_, err := model.complete(context.Background(), modelRequest{Messages: []chatMessage{{Role: "user", Content: "hello"}}}, onDelta)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// A connection may be dialled while another is being returned to the
	// pool, so allow twice the clients; without a pool sized for them it
	// was about one per call after the first round (rounds × 30).
	if n := fake.conns.Load(); n > 2*clients {
		t.Fatalf("%d calls from %d concurrent clients opened %d connections to the provider; want at most %d", clients*rounds, clients, n, 2*clients)
	}
}

// TestChatStreamHeldMemory holds 300 streamed chats open through svc dev
// (in this process) against a provider that sends one chunk and waits, and
// bounds what svc holds per open stream (heap and goroutine stacks, less the
// client's and the provider's part): 123 KiB when each stream's SSE reader
// started with a 64 KiB line buffer, about 56 KiB since. The bound leaves
// room for the run-to-run spread of goroutine stacks.
func TestChatStreamHeldMemory(t *testing.T) {
	const limit = 80 << 10
	if per, _ := svcHeldStreamBytes(t, 300); per > limit {
		t.Fatalf("svc holds %.1f KiB per open SSE chat stream waiting on its model; want at most %d KiB", per/1024, limit>>10)
	}
}
