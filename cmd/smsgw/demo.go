package main

import (
	"context"
	"flag"
	"io"
	"time"

	"smsgw/internal/demo"
)

func demoCommand(fs *flag.FlagSet) runner {
	var o demo.Options
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "gateway listen address (the demo keys are printed: keep it on loopback)")
	fs.IntVar(&o.Campaign, "campaign", 3000, "marketing messages posted at start")
	fs.DurationVar(&o.OTPEvery, "otp-every", 500*time.Millisecond, "interval of the OTP trickle (POST /v1/otp)")
	fs.DurationVar(&o.TxnEvery, "txn-every", 200*time.Millisecond, "interval of transactional messages")
	fs.IntVar(&o.Limit, "limit", 100, "the simulated provider's contract, messages/s")
	duration := fs.Duration("duration", 0, "stop after this long (0: until Ctrl-C)")
	fs.DurationVar(&o.Every, "summary-every", 2*time.Second, "interval of the terminal summary")
	fs.BoolVar(&o.Verbose, "v", false, "gateway logs on stderr (info level)")
	return func(ctx context.Context, stdout, stderr io.Writer) int {
		if *duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *duration)
			defer cancel()
		}
		if err := demo.Run(ctx, o, stdout, stderr); err != nil {
			complain(stderr, "smsgw demo: %v\n", err)
			return 1
		}
		return 0
	}
}
