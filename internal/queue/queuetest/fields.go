package queuetest

import (
	"reflect"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// FillEveryField sets every field of m to a value of its own (times at whole
// milliseconds, hours apart), so that a stored form that drops or mixes up
// a field shows in a comparison. The encoding is left out: it is derived
// from the body while the body is kept, and only a final record
// (queue.EncodeFinal) stores it. A field of a type it does not know fails
// tb, so that a field added to the domain type fails the backends' record
// tests until their records store it.
func FillEveryField(tb testing.TB, m *sms.Message) {
	tb.Helper()
	v := reflect.ValueOf(m).Elem()
	base := time.Date(2026, 11, 30, 9, 0, 0, 123_000_000, time.UTC)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Interface().(type) {
		case string:
			f.SetString("x-" + name)
		case int:
			f.SetInt(int64(i + 1))
		case bool:
			f.SetBool(true)
		case time.Time:
			f.Set(reflect.ValueOf(base.Add(time.Duration(i) * time.Hour)))
		case sms.Class:
			f.Set(reflect.ValueOf(sms.ClassMarketing))
		case sms.Status:
			f.Set(reflect.ValueOf(sms.StatusFailed))
		case sms.Encoding:
		case sms.Budget:
			// the limits are the accept's, not stored
			f.Set(reflect.ValueOf(sms.Budget{Units: i + 1, Day: sms.BudgetPeriod{ID: "d20261130"}, Month: sms.BudgetPeriod{ID: "m202611"}}))
		default:
			tb.Fatalf("sms.Message.%s is a %s: teach the records (and FillEveryField) to store it", name, f.Type())
		}
	}
}
