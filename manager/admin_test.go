package manager

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
)

// TestWriteJSONList checks that the streamed lists are the JSON documents
// writeJSON would have written: the head's members, then the list, for
// heads with and without members and for empty lists, and names that
// need escaping.
func TestWriteJSONList(t *testing.T) {
	type item struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	items := []item{{"a", 1}, {`q"uote\back`, 2}, {"<tag>&", 3}}
	type head struct {
		Namespace string `json:"namespace"`
		LSN       uint64 `json:"lsn"`
	}
	type full struct {
		Namespace string `json:"namespace"`
		LSN       uint64 `json:"lsn"`
		Entries   []item `json:"entries"`
	}
	for _, n := range []int{0, 1, len(items)} {
		for _, h := range []any{head{Namespace: "ns", LSN: 7}, struct{}{}} {
			rec := httptest.NewRecorder()
			writeJSONList(rec, h, "entries", n, func(i int) item { return items[i] })
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("n=%d head %T: status %d, type %q", n, h, rec.Code, rec.Header().Get("Content-Type"))
			}
			var got full
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("n=%d head %T: %v in %q", n, h, err, rec.Body.String())
			}
			want := full{Entries: items[:n]}
			if hd, ok := h.(head); ok {
				want.Namespace, want.LSN = hd.Namespace, hd.LSN
			}
			if got.Entries == nil {
				t.Fatalf("n=%d head %T: the list is null, want []", n, h)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("n=%d head %T: got %+v, want %+v", n, h, got, want)
			}
		}
	}
}
