package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"

	"github.com/dop251/goja"
	"github.com/google/uuid"
)

// cryptoHashes are the digests of crypto.subtle (digest and HMAC), by
// their Web Crypto names.
var cryptoHashes = map[string]func() hash.Hash{
	"SHA-1":   sha1.New,
	"SHA-256": sha256.New,
	"SHA-384": sha512.New384,
	"SHA-512": sha512.New,
}

// cryptoNatives are the Go halves of crypto and crypto.subtle. random
// adds getRandomValues and randomUUID from the system's generator (step
// and tool VMs); workflow VMs take theirs from the run's seeded generator.
func cryptoNatives(vm *goja.Runtime, n *goja.Object, random bool) {
	if random {
		n.Set("randomFill", func(view goja.Value) {
			b, ok := jsBytesView(view)
			if !ok {
				panic(vm.NewTypeError("crypto.getRandomValues: argument must be an integer typed array"))
			}
			rand.Read(b)
		})
		n.Set("randomUUID", func() string { return uuid.NewString() })
	}
	n.Set("digest", func(name string, data goja.Value) goja.Value {
		h := cryptoHash(vm, name)()
		h.Write(cryptoData(vm, data))
		return jsArrayBuffer(vm, h.Sum(nil))
	})
	n.Set("hmac", func(name string, key, data goja.Value) goja.Value {
		m := hmac.New(cryptoHash(vm, name), cryptoData(vm, key))
		m.Write(cryptoData(vm, data))
		return jsArrayBuffer(vm, m.Sum(nil))
	})
	n.Set("hmacVerify", func(name string, key, signature, data goja.Value) bool {
		m := hmac.New(cryptoHash(vm, name), cryptoData(vm, key))
		m.Write(cryptoData(vm, data))
		return hmac.Equal(m.Sum(nil), cryptoData(vm, signature))
	})
}

// cryptoHash returns the hash named name or throws a NotSupportedError-like TypeError.
func cryptoHash(vm *goja.Runtime, name string) func() hash.Hash {
	h, ok := cryptoHashes[name]
	if !ok {
		panic(vm.NewTypeError("crypto.subtle: unsupported hash %q (use SHA-1, SHA-256, SHA-384 or SHA-512)", name))
	}
	return h
}

// cryptoData returns the bytes of a BufferSource argument.
func cryptoData(vm *goja.Runtime, v goja.Value) []byte {
	b, ok := jsBytesView(v)
	if !ok {
		panic(vm.NewTypeError("crypto.subtle: data must be an ArrayBuffer, a typed array or a DataView"))
	}
	return b
}
