package manager_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/fuge-project/fuge/api/fugev1"
)

// TestServerSendsNoBDPPings speaks HTTP/2 to the manager's gRPC port frame
// by frame and runs an owner's first request and two renewals: the server
// must answer each without a PING of its own. With grpc-go's estimated
// flow-control windows the first DATA frame after a quiet spell makes the
// server send a BDP ping (and read its ack): two syscalls on the leader
// for every renewal of every owner. Fixed windows (Start) switch the
// estimate off.
func TestServerSendsNoBDPPings(t *testing.T) {
	s := startNode(t, "n1", "", nil)
	eventually(t, "leadership", s.IsLeader)
	_, addr, _ := s.Addrs()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/fuge.v1.OwnerService/Lease"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}

	pings := 0
	// roundTrip sends m on stream 1 and reads frames until the response's
	// DATA, answering the server's SETTINGS and PINGs as a client does.
	roundTrip := func(m *fugev1.LeaseRequest) *fugev1.LeaseResponse {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		msg := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b)))
		if err := fr.WriteData(1, false, append(msg, b...)); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(defaultTestTimeout)) // a deadline on a real socket, not a wait
		var body []byte
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("reading frames: %v", err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if err := fr.WriteSettingsAck(); err != nil {
						t.Fatal(err)
					}
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					pings++
					if err := fr.WritePing(true, f.Data); err != nil {
						t.Fatal(err)
					}
				}
			case *http2.RSTStreamFrame:
				t.Fatalf("stream reset: %v", f.ErrCode)
			case *http2.DataFrame:
				body = append(body, f.Data()...)
				if len(body) >= 5 && len(body) >= 5+int(binary.BigEndian.Uint32(body[1:5])) {
					var resp fugev1.LeaseResponse
					if err := proto.Unmarshal(body[5:], &resp); err != nil {
						t.Fatal(err)
					}
					return &resp
				}
			}
		}
	}
	req := hello("ns", "a", 11)
	req.Packed = false // this test reads and renews the leases as messages
	r := roundTrip(req)
	for range 2 {
		req.Header.Seq++
		req.Header.PeerNonce, req.Header.AckSeq = r.Header.Nonce, r.Header.Seq
		req.Held = append(r.Renew, r.Grant...)
		if r = roundTrip(req); r.Header.AckSeq != req.Header.Seq {
			t.Fatalf("renewal %d answered with ack %d", req.Header.Seq, r.Header.AckSeq)
		}
	}
	if len(r.Renew) == 0 {
		t.Fatalf("the owner holds nothing after its renewals: %v", r)
	}
	if pings > 0 {
		t.Fatalf("the server sent %d PINGs during three exchanges; want none (a BDP ping per request)", pings)
	}
}
