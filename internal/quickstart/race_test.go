//go:build race

package quickstart

func init() { raceEnabled = true }
