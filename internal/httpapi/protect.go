package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"smsgw/internal/admission"
	"smsgw/internal/sms"
)

// protectOne is check for one message whose number is in the field "to";
// id is the number's id on the suppression list for the message to carry
// (target.id). The caller gives the holds back (holds.giveBack) when it
// refuses the message later or nothing is sent.
func (s *Server) protectOne(ctx context.Context, cls sms.Class, to string) (id string, held admission.Holds, err error) {
	ts := []admission.Target{{To: to, Field: "to"}}
	errs, held, err := s.Protect.Check(ctx, cls, ts)
	if err != nil {
		return "", nil, err
	}
	if errs[0] != nil {
		return "", nil, errs[0]
	}
	return ts[0].ID, held, nil
}

// protectItems is check for the valid items of a batch, by class: the
// items it refuses get their problem and leave valid, which it returns
// with the OTPs it counted (each hold's target is its item's index). The
// messages of the others carry their numbers' ids (target.id).
func (s *Server) protectItems(ctx context.Context, r *http.Request, vs []validated, valid []int, items []batchItem) ([]int, admission.Holds, error) {
	var held admission.Holds
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
		ts := make([]admission.Target, len(idx))
		for k, i := range idx {
			ts[k] = admission.Target{To: vs[i].msg.To, Field: "messages[" + strconv.Itoa(i) + "].to"}
		}
		errs, hs, err := s.Protect.Check(ctx, cls, ts)
		if err != nil {
			held.GiveBack(ctx, s.Log)
			return nil, nil, err
		}
		for _, h := range hs {
			h.Target = idx[h.Target]
			held = append(held, h)
		}
		for k, e := range errs {
			if e != nil {
				s.itemError(r, &items[idx[k]], e)
				refused[idx[k]] = true
				continue
			}
			vs[idx[k]].msg.NumberID = ts[k].ID
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
