//go:build rpc || !core

package main

// hasRPC: eKuiper starts its CLI RPC server in this build (no -tags core).
const hasRPC = true
