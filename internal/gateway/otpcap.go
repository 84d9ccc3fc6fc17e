package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// otpCapKey is the key under which protection.otp_per_number counts the
// OTPs to the number whose id is id: one count per producer and number,
// so that one producer's OTPs (or a flood through one producer's key)
// cannot lock a number out for every other producer. It is a hash of the
// producer's name and the number's id (itself a keyed hash of the number),
// the same length as a number id; requests without a producer (none reach
// the check today) count under the number's id alone.
func otpCapKey(ctx context.Context, id string) string {
	p := producerFrom(ctx)
	if p == nil {
		return id
	}
	sum := sha256.Sum256([]byte("otp-per-number\x00" + p.Name + "\x00" + id))
	return hex.EncodeToString(sum[:16])
}
