//go:build core && !rpc

package main

// hasRPC: eKuiper's CLI RPC server is left out of this build (-tags core).
const hasRPC = false
