package senderlanes

import (
	"fmt"
	"io"
	"strings"

	"smsgw/internal/bench"
)

// WriteTable prints the report: one row per pacing, then what the columns
// mean.
func WriteTable(w io.Writer, rep Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "smsgw bench --scenario sender-lanes: %d replicas on Redis; provider %d/s for the account, per sender %s (a sliding second; over it, 429 of scope sender);\n",
		rep.Replicas, rep.Contract, rep.Senders)
	fmt.Fprintf(&b, "campaign %d from Mkt1 and %d from Mkt2 (marketing, posted at once), OTP %g/s from Auth (POST /v1/otp)\n\n", rep.Mkt1, rep.Mkt2, rep.OTPRate)
	fmt.Fprintf(&b, "%-13s %-19s %9s %8s %6s %9s %9s %10s %8s %8s %7s %7s %8s %9s\n",
		"pacing", "sender 429s", "acct 429s", "tries", "held", "put back", "otp 200", "otp refused", "otp p50", "otp p99", "Mkt2 s", "Mkt1 s", "lost", "dup")
	for _, r := range rep.Results {
		s429 := make([]string, 0, len(Senders))
		for _, p := range Senders {
			s429 = append(s429, fmt.Sprint(r.Sender429[p.Name]))
		}
		lost := fmt.Sprintf("%d/%d", r.Lost, r.Messages)
		if !r.Finished {
			lost += "!"
		}
		fmt.Fprintf(&b, "%-13s %-19s %9d %8d %6d %9d %9d %10d %8s %8s %7.1f %7.1f %8s %9d\n",
			r.Mode, fmt.Sprintf("%d (%s)", r.Sender429s, strings.Join(s429, "/")), r.Account429, r.Tries, r.PeakHeld, r.SenderWaits,
			r.OTPOK, r.OTPRefused, bench.Millis(r.OTPP50MS, r.OTPOK), bench.Millis(r.OTPP99MS, r.OTPOK), r.Mkt2S, r.Mkt1S, lost, r.Duplicated)
	}
	for _, r := range rep.Results {
		if r.Configured != "" {
			fmt.Fprintf(&b, "\n%s: limits.senders %s (a tenth below the provider's).", r.Mode, r.Configured)
		}
		if !r.Finished {
			fmt.Fprintf(&b, "\n%s: NOT FINISHED: the campaign had not reached the provider when the run's time ran out.", r.Mode)
		}
	}
	b.WriteString(`

sender 429s: the provider's 429s of a sender's scope, in all (Mkt1/Mkt2/Auth); acct 429s: the account's;
tries: sends that reached the provider, accepted or refused; held: most campaign messages waiting in smsgw's
queue at once (every 200 ms); put back: messages smsgw held back for their sender's limit or pause without
calling the provider; otp p50/p99: the gateway's acceptance to the provider; Mkt2 s, Mkt1 s: from posting
to that sender's last message at the provider; lost: accepted messages never at the provider, of all
accepted; dup: messages at the provider more than once.
`)
	_, err := io.WriteString(w, b.String())
	return err
}
