package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// explain says in one line why a strategy overshoots (or does not), and
// notes the run's figures that show it.
func explain(cfg Config, r Result) (why, notes string) {
	switch r.Strategy {
	case PerPod:
		why = fmt.Sprintf("%d pods × %d/s = %d/s offered against %d/s: the limit is per replica, so the provider rejects the surplus and each 429 is retried in place 4×",
			cfg.Pods, cfg.Contract/2, cfg.Pods*(cfg.Contract/2), cfg.Contract)
	case RedisFixedWindow:
		why = "GET then INCR is a read-then-write race (pods that read 99 all send); windows are keyed by each pod's own clock, so two windows are open at once; a window edge allows 2× in one second"
	case AtomicIncr:
		why = "the count is atomic but still a fixed second of each pod's clock: skewed pods fill two windows at once, and a window's last 100 plus the next window's first 100 pass within one second"
	case GCRA:
		why = fmt.Sprintf("one GCRA schedule on Redis TIME: at most %g/s + burst %d in any second on any window shape; OTP has its own lane, marketing is capped at %g/s; a 429 pauses every pod",
			cfg.Target, cfg.Burst, cfg.Marketing)
	}
	var figs []string
	if r.MaxAttemptsIn1s > cfg.Contract {
		figs = append(figs, fmt.Sprintf("%d sends reached the provider in one second", r.MaxAttemptsIn1s))
	}
	if r.WouldSuspend {
		figs = append(figs, fmt.Sprintf("%d 429s > %d: the account would be suspended for an hour", r.Rejected429, SuspendAfter))
	}
	if r.OTPDropped > 0 {
		figs = append(figs, fmt.Sprintf("%d of %d OTPs dropped after five 429s", r.OTPDropped, r.OTPOffered))
	}
	if late := r.OTPOffered - r.OTPSent - r.OTPDropped; late > 0 {
		figs = append(figs, fmt.Sprintf("%d OTPs still queued when the run ended", late))
	}
	return why, strings.Join(figs, "; ")
}

// WriteTable prints the report as a table and one line per strategy on why.
func WriteTable(w io.Writer, rep Report) error {
	var b strings.Builder
	start := "at once"
	if rep.StartPhMS >= 0 {
		start = fmt.Sprintf("%dms past a second", rep.StartPhMS)
	}
	fmt.Fprintf(&b, "smsgw bench: %d pods, %gs per run, contract %d/s, OTP %g/s behind a campaign FIFO of %d (old), pod clocks ±%dms (old), flood starts %s, fixed windows at offset %dms\n\n",
		rep.Pods, rep.DurationS, rep.Contract, rep.OTPRate, rep.QueueDepth, rep.SkewMS, start, rep.OffsetMS)
	fmt.Fprintf(&b, "%-19s %-8s %6s %7s %8s %7s %7s %4s %9s %8s %8s %16s\n",
		"strategy", "window", "429s", "max/1s", "tried/1s", "rate/s", "target", "dup", "otp sent", "otp p50", "otp p99", "redis calls/msg")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%-19s %-8s %6d %7d %8d %7.1f %7g %4d %9s %8s %8s %16.1f\n",
			r.Strategy, r.Window, r.Rejected429, r.MaxIn1s, r.MaxAttemptsIn1s, r.Rate, r.Target, r.Duplicates,
			fmt.Sprintf("%d/%d", r.OTPSent, r.OTPOffered), Millis(r.OTPP50MS, r.OTPSent), Millis(r.OTPP99MS, r.OTPSent), r.RedisPerMsg)
	}
	b.WriteString("\n")
	seen := map[Strategy]bool{}
	for _, r := range rep.Results {
		if seen[r.Strategy] {
			continue
		}
		seen[r.Strategy] = true
		fmt.Fprintf(&b, "%-19s %s\n", r.Strategy, r.Why)
		for _, o := range rep.Results {
			if o.Strategy == r.Strategy && o.Notes != "" {
				fmt.Fprintf(&b, "%-19s   %s: %s\n", "", o.Window, o.Notes)
			}
		}
	}
	b.WriteString("\nmax/1s: most accepted by the provider in any 1 s interval; tried/1s: most sends (any answer) in any 1 s;\nrate/s: accepted per second of sending time; otp p50/p99: arrival at the senders to arrival at the provider.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Millis shows a latency of v ms measured over n samples ("-" for none).
func Millis(v float64, n int) string {
	if n == 0 {
		return "-"
	}
	if v < 10 {
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

// WriteJSON prints a report (this package's, or a scenario's) as
// indented JSON.
func WriteJSON(w io.Writer, rep any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
