package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// Lite dispatch profiles (issue 25 §2, docs/operations-lite.md): the 5.5.0
// broker hands a wildcard group's lite topics out through per-client event
// sets and a full dispatch on a scan tick, and its defaults (100 lite topics
// per set, a 10 s tick) cap a backlog spread over many lite topics at about
// clients × 100 × messages per lite topic ÷ 10 s. scripts/rocketmq.sh
// starts the broker with a profile (RMQ_LITE_PROFILE); the topics scenario
// runs under each profile of -lite-profiles, side by side in the report, and
// every other scenario under the first. The script is the one place the
// profiles' values are written down: the harness reads them from its conf
// command, and gives the emulator the same values.

// liteProfileMarker starts the lite dispatch lines of a broker.conf that
// scripts/rocketmq.sh writes (none for the 5.5.0 defaults).
const liteProfileMarker = "# Lite dispatch"

// liteOverrides are scripts/rocketmq.sh's single settings that override a
// profile: unset when the harness asks for a profile's values or starts the
// broker with a profile, so that a profile means the same in every run.
var liteOverrides = []string{"RMQ_MAX_CLIENT_EVENT_COUNT", "RMQ_LITE_EVENT_CHECK_MS", "RMQ_LITE_FULL_DISPATCH_DELAY_MS", "RMQ_LITE_CLIENT_FULL_DISPATCH_DELAY_MS", "RMQ_STORE_TYPE"}

// parseLiteSettings reads the key=value lines that follow the lite dispatch
// marker in a broker.conf's text.
func parseLiteSettings(conf string) map[string]string {
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, liteProfileMarker) {
			in = true
			continue
		}
		if !in || line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// formatLiteSettings is settings as the report and log print them.
func formatLiteSettings(s map[string]string) string {
	if len(s) == 0 {
		return "the 5.5.0 defaults"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, k+"="+s[k])
	}
	return strings.Join(parts, ", ")
}

// scriptEnv is the environment scripts/rocketmq.sh runs with for profile.
func scriptEnv(profile string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "RMQ_LITE_PROFILE" || slices.Contains(liteOverrides, k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "RMQ_LITE_PROFILE="+profile)
}

// profileSettings asks scripts/rocketmq.sh which broker.conf lines profile
// means (its conf command starts and changes nothing).
func profileSettings(repo, profile string) (map[string]string, error) {
	cmd := exec.Command(filepath.Join(repo, "scripts", "rocketmq.sh"), "conf")
	cmd.Env = scriptEnv(profile)
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return nil, fmt.Errorf("lite profile %q: scripts/rocketmq.sh conf: %s", profile, msg)
	}
	return parseLiteSettings(string(out)), nil
}

// runningSettings asks scripts/rocketmq.sh for the lite dispatch lines of
// the broker.conf the running broker was started with.
func runningSettings(repo string) (map[string]string, error) {
	out, err := exec.Command(filepath.Join(repo, "scripts", "rocketmq.sh"), "lite").Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/rocketmq.sh lite: %w", err)
	}
	return parseLiteSettings(liteProfileMarker + "\n" + string(out)), nil
}

// profileOf names the profile of scripts/rocketmq.sh whose settings (as its
// conf command prints them) are settings: "" when none is, with the names
// of those it compared.
func profileOf(repo string, settings map[string]string) (string, []string, error) {
	out, err := exec.Command(filepath.Join(repo, "scripts", "rocketmq.sh"), "profiles").Output()
	if err != nil {
		return "", nil, fmt.Errorf("scripts/rocketmq.sh profiles: %w", err)
	}
	names := strings.Fields(string(out))
	for _, name := range names {
		s, err := profileSettings(repo, name)
		if err != nil {
			return "", nil, err
		}
		if maps.Equal(s, settings) {
			return name, names, nil
		}
	}
	return "", names, nil
}

// fakeLiteOptions are the rmqfake options that model settings. rmqfake
// models the wildcard group's dispatch; a key it does not model is
// returned in ignored.
func fakeLiteOptions(settings map[string]string) (opts []rmqfake.Option, ignored []string, err error) {
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v, perr := strconv.Atoi(settings[k])
		switch k {
		case "maxClientEventCount":
			if perr == nil {
				opts = append(opts, rmqfake.MaxClientEventCount(v))
			}
		case "liteEventCheckInterval":
			if perr == nil {
				opts = append(opts, rmqfake.LiteEventCheckInterval(time.Duration(v)*time.Millisecond))
			}
		case "liteEventFullDispatchDelayTimeForWildcardGroup":
			if perr == nil {
				opts = append(opts, rmqfake.LiteFullDispatchDelay(time.Duration(v)*time.Millisecond))
			}
		default:
			ignored = append(ignored, k)
			continue
		}
		if perr != nil {
			return nil, nil, fmt.Errorf("%s=%q: want a whole number", k, settings[k])
		}
	}
	return opts, ignored, nil
}

// liteProfile is a profile the run used, with the settings it stands for.
type liteProfile struct {
	Name     string
	Settings map[string]string
}

// useProfile makes the target run under profile: on the emulator, a new
// rmqfake with its settings; on the real broker, when the running broker's
// settings differ, a restart by scripts/rocketmq.sh (down, then up with
// RMQ_LITE_PROFILE: a fresh store, so the fixtures of the steps still to run
// are created afterwards by the caller). It reports whether it changed
// anything.
func (b *bench) useProfile(ctx context.Context, profile string) (bool, error) {
	want, err := profileSettings(b.cfg.repo, profile)
	if err != nil {
		return false, err
	}
	b.noteProfile(profile, want)
	if b.tgt.fake != nil {
		if profile == b.fakeProfile || (b.fakeProfile == "" && len(want) == 0) {
			// (a fresh rmqfake has the 5.5.0 defaults)
			b.fakeProfile = profile
			return false, nil
		}
		opts, ignored, err := fakeLiteOptions(want)
		if err != nil {
			return false, fmt.Errorf("lite profile %q: %w", profile, err)
		}
		fake, err := rmqfake.New(append(emulatorOptions(), opts...)...)
		if err != nil {
			return false, err
		}
		b.tgt.fake.Stop()
		b.tgt.fake, b.tgt.endpoint, b.fakeProfile = fake, fake.Addr(), profile
		note := ""
		if len(ignored) > 0 {
			note = " (rmqfake does not model " + strings.Join(ignored, ", ") + ")"
		}
		fmt.Fprintf(b.log, "harness: lite profile %s on a new rmqfake: %s%s\n", profile, formatLiteSettings(want), note)
		return true, nil
	}
	have, err := runningSettings(b.cfg.repo)
	if err != nil {
		return false, err
	}
	if maps.Equal(have, want) {
		b.brokerProfile = profile
		return false, nil
	}
	had := formatLiteSettings(have)
	if b.startSettings == nil {
		// The broker as found: restored at the end by the name of its
		// profile (restoreProfile).
		b.startSettings = have
		if b.startProfile, b.knownProfiles, err = profileOf(b.cfg.repo, have); err != nil {
			return false, err
		}
		if b.startProfile != "" {
			had = "the lite profile " + b.startProfile + ": " + had
		}
	}
	fmt.Fprintf(b.log, "harness: lite profile %s: restarting the broker with %s (scripts/rocketmq.sh down, up; it had %s) ...\n",
		profile, formatLiteSettings(want), had)
	if err := b.restartBroker(ctx, scriptEnv(profile)); err != nil {
		return false, fmt.Errorf("lite profile %q: %w", profile, err)
	}
	b.brokerProfile = profile
	return true, nil
}

// restoreProfile restarts the real broker with the lite profile it had when
// the run first changed it, by the profile's name (scripts/rocketmq.sh up
// with RMQ_LITE_PROFILE): a profile is more than the lite dispatch lines the
// harness compares (the many profile's lite TTL scan interval, for one), and
// several of its lines have no variable of their own. A broker found with
// settings of no profile (variables over a profile) is left running with the
// run's last profile, and the log and the report say so (restoreNote).
func (b *bench) restoreProfile(ctx context.Context) error {
	if b.tgt.fake != nil || b.startSettings == nil {
		return nil
	}
	have, err := runningSettings(b.cfg.repo)
	if err == nil && maps.Equal(have, b.startSettings) {
		return nil
	}
	if b.startProfile == "" {
		b.restoreNote = fmt.Sprintf("the broker was found running with the lite settings %s, which are no profile of scripts/rocketmq.sh (%s): it is not restarted with them and is left running with the lite profile %s (%s); to get it back, run scripts/rocketmq.sh down, then up with the variables it was started with",
			formatLiteSettings(b.startSettings), strings.Join(b.knownProfiles, ", "), b.brokerProfile, formatLiteSettings(have))
		fmt.Fprintf(b.log, "harness: %s\n", b.restoreNote)
		return nil
	}
	fmt.Fprintf(b.log, "harness: restarting the broker with the lite profile it had, %s (%s) ...\n", b.startProfile, formatLiteSettings(b.startSettings))
	if err := b.restartBroker(ctx, scriptEnv(b.startProfile)); err != nil {
		return fmt.Errorf("restoring the lite profile %q: %w", b.startProfile, err)
	}
	b.brokerProfile = b.startProfile
	return nil
}

// restartBroker stops the broker, starts it with env, and samples the new
// JVMs from then on.
func (b *bench) restartBroker(ctx context.Context, env []string) error {
	t0 := time.Now()
	script := filepath.Join(b.cfg.repo, "scripts", "rocketmq.sh")
	if out, err := exec.CommandContext(ctx, script, "down").CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/rocketmq.sh down: %v: %s", err, strings.TrimSpace(string(out)))
	}
	up := exec.CommandContext(ctx, script, "up")
	up.Env = env
	if out, err := up.CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/rocketmq.sh up: %v: %s", err, strings.TrimSpace(string(out)))
	}
	pids, err := brokerPIDs(b.cfg.repo)
	if err != nil {
		return err
	}
	if b.tgt.cpu != nil {
		b.tgt.cpu.close()
	}
	if b.tgt.cpu, err = startCPUSampler(pids, 100*time.Millisecond, func() ([]int, error) { return brokerPIDs(b.cfg.repo) }); err != nil {
		return err
	}
	fmt.Fprintf(b.log, "harness: broker restarted in %s\n", time.Since(t0).Round(time.Second))
	b.brokerRestarts++
	return nil
}

// noteProfile keeps the settings of each profile the run used, for the report.
func (b *bench) noteProfile(name string, settings map[string]string) {
	for _, p := range b.profiles {
		if p.Name == name {
			return
		}
	}
	b.profiles = append(b.profiles, liteProfile{name, settings})
}
