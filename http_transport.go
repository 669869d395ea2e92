package main

// The connection pools of svc's outbound HTTP clients, each sized and tuned
// for its load (issue 26). http.DefaultTransport keeps two idle connections
// per host, so under concurrency most requests to one provider opened a new
// connection (at 32 concurrent chats, three in four did, a quarter of svc's
// CPU). Every pool here keeps as many idle connections per host as the
// concurrency it serves, bounds its dials and TLS handshakes, and speaks
// HTTP/2 where the server offers it over TLS (requests then share
// connections). Answers have no overall time limit at this level: model
// answers, fetches and proxied streams may take long, and each caller bounds
// its own call.

import (
	"context"
	"net"
	"net/http"
	"time"
)

const (
	// httpDialTimeout bounds establishing a TCP connection.
	httpDialTimeout = 10 * time.Second
	// httpKeepAlive is the TCP keep-alive period of outbound connections.
	httpKeepAlive = 30 * time.Second
	// httpTLSHandshakeTimeout bounds a TLS handshake.
	httpTLSHandshakeTimeout = 10 * time.Second
	// httpIdleConnTimeout closes a pooled connection unused this long.
	httpIdleConnTimeout = 90 * time.Second
	// httpMaxIdleConns bounds the idle connections of one pool, all hosts.
	httpMaxIdleConns = 512
	// providerIdlePerHost is how many idle connections the model clients
	// keep per provider: as many as the chats that may call it at once
	// on a busy box (over HTTP/1.1; over HTTP/2 they share a few).
	providerIdlePerHost = 256
	// fetchIdlePerHost is the same for user code's fetch() and the
	// storage client: steps and tools running at once, calling one API.
	fetchIdlePerHost = 64
	// httpMaxResponseHeaderBytes bounds the headers of an answer.
	httpMaxResponseHeaderBytes = 1 << 20
	// providerConnBuffer is the read and the write buffer of a provider
	// connection (net/http's default: 4 KiB each), held for as long as a
	// streamed answer stays open. A request's headers fit; its body and a
	// whole answer's larger reads bypass the buffers.
	providerConnBuffer = 2 << 10
)

// newOutboundTransport returns the pool of the clients that reach the
// internet as the process's environment says (HTTPS_PROXY, HTTP_PROXY and
// NO_PROXY, as http.DefaultTransport did before), keeping idlePerHost idle
// connections per host.
func newOutboundTransport(idlePerHost int) *http.Transport {
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: httpDialTimeout, KeepAlive: httpKeepAlive}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           httpMaxIdleConns,
		MaxIdleConnsPerHost:    idlePerHost,
		IdleConnTimeout:        httpIdleConnTimeout,
		TLSHandshakeTimeout:    httpTLSHandshakeTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: httpMaxResponseHeaderBytes,
	}
}

// newProviderHTTPClient is the client of the model providers (one per
// runtime, shared by every agent's calls). Its Timeout is zero: a streamed
// answer may take long, and each call has its own deadline
// (providerPolicy.Timeout).
func newProviderHTTPClient() *http.Client {
	t := newOutboundTransport(providerIdlePerHost)
	t.ReadBufferSize, t.WriteBufferSize = providerConnBuffer, providerConnBuffer
	return &http.Client{Transport: t}
}

// newFetchHTTPClient is the client of user code's fetch(): the environment's
// proxies, redirects followed as fetch's redirect mode says (js_fetch.go),
// each fetch bounded by defaultFetchTimeout.
func newFetchHTTPClient() *http.Client {
	return &http.Client{Transport: newOutboundTransport(fetchIdlePerHost), Timeout: defaultFetchTimeout}
}

// newCPProxyTransport returns the connection pool of the control plane's
// proxy and of link to the boxes, dialling only addresses inside nets
// (cp_network.go). It never reads the environment's proxy settings (the
// dialled address is the box's, so the check holds) and never
// decompresses: bytes pass as sent.
func newCPProxyTransport(nets cpNetworks) *http.Transport {
	return &http.Transport{
		DialContext:            (&net.Dialer{Timeout: cpProxyDialTimeout, KeepAlive: httpKeepAlive, Control: nets.control}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           httpMaxIdleConns,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        httpIdleConnTimeout,
		TLSHandshakeTimeout:    httpTLSHandshakeTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: httpMaxResponseHeaderBytes,
		DisableCompression:     true,
	}
}

// newRelayTunnelTransport returns the HTTP/2 client transport of one
// tunnel: every request to the dev session behind it is a stream of conn
// (the one connection, so there is no pool to size), pinged when silent
// for relayPingEvery and dropped when a ping goes unanswered.
func newRelayTunnelTransport(conn net.Conn) *http.Transport {
	return &http.Transport{
		Protocols:              relayH2C(),
		DialContext:            func(context.Context, string, string) (net.Conn, error) { return conn, nil },
		MaxResponseHeaderBytes: httpMaxResponseHeaderBytes,
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: relayPingEvery, PingTimeout: relayPingEvery / 2},
	}
}
