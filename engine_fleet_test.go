package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// list returns the runs and queued starts of every partition open here
// (tests).
func (f *fleet) list() ([]runRecord, []queuedTrigger) {
	var runs []runRecord
	var queued []queuedTrigger
	for _, e := range f.engines() {
		r, q := e.list()
		runs, queued = append(runs, r...), append(queued, q...)
	}
	return runs, queued
}

// get returns a copy of run id from its partition, when open here (tests).
func (f *fleet) get(id string) (runRecord, bool) {
	if e := f.held(partitionOfID(id, f.parts)); e != nil {
		return e.get(id)
	}
	return runRecord{}, false
}

// A run's id, a queued start's and a hook token name the partition the
// run was made in; ids of one partition, and strings that are no id, name
// partition 0.
func TestPartitionOfID(t *testing.T) {
	for _, parts := range []int{1, 2, 16, 256} {
		for p := range parts {
			id := newPartitionedID(p, parts)
			for _, s := range []string{id, queueIDPrefix + id, hookTokenPrefix + id + "_0123abcd"} {
				if got := partitionOfID(s, parts); got != p {
					t.Fatalf("partitionOfID(%q, %d) = %d, want %d", s, parts, got, p)
				}
			}
		}
	}
	old := newPartitionedID(0, 1) // a version 4 UUID, made before partitions
	for _, s := range []string{old, "nonsense", "", queueIDPrefix, hookTokenPrefix + "x_y"} {
		if got := partitionOfID(s, 16); got != 0 {
			t.Errorf("partitionOfID(%q) = %d, want 0", s, got)
		}
	}
}

// Keys spread over the partitions, and the view deals partitions out over
// the members in turn, the same way on every replica.
func TestFleetAssignment(t *testing.T) {
	seen := map[int]int{}
	for i := range 1600 {
		seen[hashPartition(fmt.Sprint("key", i), 16)]++
	}
	for p := range 16 {
		if seen[p] < 50 {
			t.Errorf("partition %d got %d of 1600 keys", p, seen[p])
		}
	}
	members := []fleetMember{{Owner: "a"}, {Owner: "b"}, {Owner: "c"}, {Owner: "d"}}
	for n := 1; n <= 4; n++ {
		held := map[string]int{}
		for p := range 16 {
			owners := 0
			for _, m := range members[:n] {
				if (fleetView{self: m.Owner, members: members[:n]}).owns(p) {
					owners++
					held[m.Owner]++
				}
			}
			if owners != 1 {
				t.Fatalf("%d members: partition %d has %d owners", n, p, owners)
			}
		}
		for _, m := range members[:n] {
			if held[m.Owner] > (16+n-1)/n {
				t.Errorf("%d members: %s holds %d partitions", n, m.Owner, held[m.Owner])
			}
		}
	}
	if (fleetView{}).owns(0) {
		t.Error("an empty view owns a partition")
	}
}

// A failure keeps its identity and its message across a call between
// replicas.
func TestFleetErrorsTravel(t *testing.T) {
	for _, err := range []error{errRunNotFound, errRunEnded, errHookUsed, errHookNotFound, context.DeadlineExceeded,
		fmt.Errorf("%w: the lease", errJournalUnavailable), fmt.Errorf("%w: check it", errJournalOutcomeUnknown)} {
		got := encodeFleetError(err).decode()
		if got.Error() != err.Error() {
			t.Errorf("message %q became %q", err, got)
		}
		for _, s := range fleetSentinels {
			if errors.Is(err, s.err) != errors.Is(got, s.err) {
				t.Errorf("%q: errors.Is(%v) changed", err, s.err)
			}
		}
	}
	se := &startError{Code: "workflow_not_found", Message: "workflow \"x\" not found", Err: errWorkflowNotFound}
	var got *startError
	if !errors.As(encodeFleetError(se).decode(), &got) || got.Code != se.Code || got.Message != se.Message || !errors.Is(got, errWorkflowNotFound) {
		t.Errorf("a start's refusal became %#v", got)
	}
	if encodeFleetError(nil) != nil || (*fleetWireError)(nil).decode() != nil {
		t.Error("no error did not stay none")
	}
}

// The address a replica advertises: the one set, checked, or its
// listener's, with this host's name for an address that binds them all.
func TestFleetAddress(t *testing.T) {
	ln := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}
	if got, err := fleetAddress("", ln); err != nil || got != "http://10.0.0.5:8080" {
		t.Errorf("from the listener = %q %v", got, err)
	}
	host, _ := os.Hostname()
	if got, err := fleetAddress("", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}); err != nil || got != "http://"+net.JoinHostPort(host, "8080") {
		t.Errorf("from 0.0.0.0 = %q %v", got, err)
	}
	if got, err := fleetAddress("https://box-a.internal:8443/", ln); err != nil || got != "https://box-a.internal:8443" {
		t.Errorf("set = %q %v", got, err)
	}
	for _, bad := range []string{"box-a:8080", "ftp://box-a:21", "http://box-a", "http://box-a:8080/api", "http://u:p@box-a:8080", "http://box-a:8080?x=1"} {
		if _, err := fleetAddress(bad, ln); err == nil || !strings.Contains(err.Error(), "SVC_FLEET_ADDRESS") {
			t.Errorf("SVC_FLEET_ADDRESS=%q: %v; want a refusal naming the variable", bad, err)
		}
	}
}

// On the file journal there are no calls between replicas: the route does
// not exist, whatever token a caller sends.
func TestFleetRouteAbsentOnTheJournal(t *testing.T) {
	te := newTestEngine(t)
	srv, err := newTestServer(&runtimeCore{log: discardLogger(), engine: soloFleet(te.engine), proj: &project{Dir: te.dir}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "anything"} {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+fleetRPCPath+fleetOpFind+"?p=0", strings.NewReader(`{"ID":"x"}`))
		req.Header.Set(fleetTokenHeader, tok)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("the fleet's route on the file journal, token %q = %d; want 404", tok, rec.Code)
		}
	}
}
