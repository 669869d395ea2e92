package main

// The cost of svc dev's owner check (issue 36, item 3): a start without a
// key, admitted because the kernel names the developer's account as the
// client socket's owner, against the same start with the dev key, which
// skips the lookup. Clients open a connection per request (as Python's
// urllib does, and Go's default client past its two idle connections), so
// every start pays a lookup; and the socket table holds 50,000 more
// entries (TIME_WAIT, which another account makes for free), which a scan
// of /proc/net/tcp paid for on every connection.
//
//	go test -run '^$' -bench OwnerCheck -benchtime=1x .

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchOwnerStarts and benchOwnerClients shape one leg: starts of ping
// from clients that each open a connection per request.
const (
	benchOwnerStarts  = 2000
	benchOwnerClients = 8
	benchOwnerIdle    = 50000
)

func BenchmarkOwnerCheck(b *testing.B) {
	dir := projectDir(b)
	d := startDevProcess(b, dir, freePortBase(b), baseEnv("SVC_DATABASE_URL="+testPostgresURL(b), "OPENAI_API_KEY=sk-bench", "OPENAI_BASE_URL=http://127.0.0.1:9/v1"))
	d.payload = d.nextPayload(60 * time.Second)
	keyRaw, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		b.Fatal(err)
	}
	key := strings.TrimSpace(string(keyRaw))
	tw := benchTimeWaits(b, benchOwnerIdle)
	b.ReportMetric(float64(tw), "time-wait-sockets")

	leg := func(withKey bool) (p50, p99 time.Duration, perSec float64, cpu time.Duration) {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		lat := make([]time.Duration, 0, benchOwnerStarts)
		var mu sync.Mutex
		var wg sync.WaitGroup
		cpu0 := procCPU(d.cmd.Process.Pid, false)
		began := time.Now()
		for c := range benchOwnerClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range benchOwnerStarts / benchOwnerClients {
					req, _ := http.NewRequest("POST", d.url("/api/workflows/ping/start"), strings.NewReader("{}"))
					req.Header.Set("Content-Type", "application/json")
					if withKey {
						req.Header.Set("Authorization", "Bearer "+key)
					}
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Errorf("client %d: %v", c, err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						b.Errorf("start = %d", resp.StatusCode)
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		wall := time.Since(began)
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no start answered")
		}
		return lat[len(lat)/2], lat[len(lat)*99/100], float64(len(lat)) / wall.Seconds(), (procCPU(d.cmd.Process.Pid, false) - cpu0) / time.Duration(len(lat))
	}
	leg(false) // warm: the VM pool, the journal's files
	for range b.N {
		var keyless, keyed [4]float64
		for range 3 { // alternated, so a drift of the machine meets both
			p50, p99, rate, cpu := leg(false)
			keyless = [4]float64{keyless[0] + ms(p50)/3, keyless[1] + ms(p99)/3, keyless[2] + rate/3, keyless[3] + float64(cpu.Microseconds())/3}
			p50, p99, rate, cpu = leg(true)
			keyed = [4]float64{keyed[0] + ms(p50)/3, keyed[1] + ms(p99)/3, keyed[2] + rate/3, keyed[3] + float64(cpu.Microseconds())/3}
		}
		b.ReportMetric(keyless[0], "keyless-p50-ms")
		b.ReportMetric(keyless[1], "keyless-p99-ms")
		b.ReportMetric(keyless[2], "keyless-starts/s")
		b.ReportMetric(keyless[3], "keyless-svc-cpu-µs/start")
		b.ReportMetric(keyed[0], "keyed-p50-ms")
		b.ReportMetric(keyed[1], "keyed-p99-ms")
		b.ReportMetric(keyed[2], "keyed-starts/s")
		b.ReportMetric(keyed[3], "keyed-svc-cpu-µs/start")
		b.ReportMetric(keyless[3]/keyed[3], "keyless/keyed-cpu")
	}
	b.Logf("TIME_WAIT entries while measuring: %d (filled %d)", benchTimeWaitCount(), tw)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchTimeWaits leaves n TCP connections in TIME_WAIT on loopback (the
// client closes first), spread over listeners of their own so the
// ephemeral ports last, and returns how many the kernel then counts. They
// hold no descriptor and last a minute.
func benchTimeWaits(b *testing.B, n int) int {
	const perListener = 20000
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for len(lns)*perListener < n {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { // the server's end waits for the client's FIN, then closes
					c.Read(make([]byte, 1))
					c.Close()
				}()
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				c, err := net.Dial("tcp4", lns[i/perListener].Addr().String())
				if err != nil {
					b.Errorf("dial %d: %v", i, err)
					return
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	return benchTimeWaitCount()
}

// benchTimeWaitCount is the "tw" count of /proc/net/sockstat.
func benchTimeWaitCount() int {
	raw, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "TCP:") {
			continue
		}
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "tw" {
				var v int
				fmt.Sscan(f[i+1], &v)
				return v
			}
		}
	}
	return 0
}
