package gateway

import (
	"context"
	"net/http"
	"strconv"

	"smsgw/internal/sms"
)

// protectOne is check for one message whose number is in the field "to";
// id is the number's id on the suppression list for the message to carry
// (target.id). The caller gives the holds back (holds.giveBack) when it
// refuses the message later or nothing is sent.
func (s *server) protectOne(ctx context.Context, cls sms.Class, to string) (id string, held holds, err error) {
	ts := []target{{to: to, field: "to"}}
	errs, held, err := s.protect.check(ctx, cls, ts)
	if err != nil {
		return "", nil, err
	}
	if errs[0] != nil {
		return "", nil, errs[0]
	}
	return ts[0].id, held, nil
}

// protectItems is check for the valid items of a batch, by class: the
// items it refuses get their problem and leave valid, which it returns
// with the OTPs it counted (each hold's target is its item's index). The
// messages of the others carry their numbers' ids (target.id).
func (s *server) protectItems(ctx context.Context, r *http.Request, vs []validated, valid []int, items []batchItem) ([]int, holds, error) {
	var held holds
	byClass := map[sms.Class][]int{}
	for _, i := range valid {
		byClass[vs[i].msg.Class] = append(byClass[vs[i].msg.Class], i)
	}
	refused := map[int]bool{}
	for _, cls := range sms.Classes {
		idx := byClass[cls]
		if len(idx) == 0 {
			continue
		}
		ts := make([]target, len(idx))
		for k, i := range idx {
			ts[k] = target{to: vs[i].msg.To, field: "messages[" + strconv.Itoa(i) + "].to"}
		}
		errs, hs, err := s.protect.check(ctx, cls, ts)
		if err != nil {
			held.giveBack(ctx, s.log)
			return nil, nil, err
		}
		for _, h := range hs {
			h.target = idx[h.target]
			held = append(held, h)
		}
		for k, e := range errs {
			if e != nil {
				s.itemError(r, &items[idx[k]], e)
				refused[idx[k]] = true
				continue
			}
			vs[idx[k]].msg.NumberID = ts[k].id
		}
	}
	out := valid[:0:0]
	for _, i := range valid {
		if !refused[i] {
			out = append(out, i)
		}
	}
	return out, held, nil
}
