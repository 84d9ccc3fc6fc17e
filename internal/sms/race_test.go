//go:build race

package sms

// raceDetector is true in a test binary built with -race.
const raceDetector = true
