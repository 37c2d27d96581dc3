package admin

// The JSON shapes of the manager's admin API (manager.Server.Handler).
// Times are RFC 3339 strings and positions 16-digit hex strings, kept as
// the API sends them.

// Cluster is GET /v1/cluster: this node's view of the raft cluster.
type Cluster struct {
	NodeID      string          `json:"node_id"`
	Role        string          `json:"role"` // leader, follower or candidate
	LeaderID    string          `json:"leader_id"`
	LeaderGRPC  string          `json:"leader_grpc"`
	LeaderHTTP  string          `json:"leader_http"`
	Term        uint64          `json:"term"`
	LastIndex   uint64          `json:"last_index"`
	CommitIndex uint64          `json:"commit_index"`
	Servers     []ClusterServer `json:"servers"`
	// LookupStreams is this node's open xDS streams; StandbysInContact, on
	// the leader, the standbys it sends Lookups to.
	LookupStreams     int      `json:"lookup_streams"`
	StandbysInContact []string `json:"standbys_in_contact"`
}

// ClusterServer is a member of the raft configuration.
type ClusterServer struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"` // Voter, Nonvoter or Staging
}

// Namespace is one namespace; POST /v1/namespaces takes the same shape,
// where zero fields take the manager's defaults.
type Namespace struct {
	Name          string `json:"name"`
	RingSize      int    `json:"ring_size,omitempty"`
	Header        string `json:"header,omitempty"`
	LeaseDuration string `json:"lease_duration,omitempty"` // a Go duration, "60s"
	// Balance is the balancing policy: off, seeds or fit;
	// BalanceInterval the least time between its rounds (a Go duration).
	Balance         string `json:"balance,omitempty"`
	BalanceInterval string `json:"balance_interval,omitempty"`
}

// NamespaceList is GET /v1/namespaces.
type NamespaceList struct {
	Namespaces []Namespace `json:"namespaces"`
}

// Ring is GET /v1/namespaces/{ns}/ring: the ring the namespace moves toward.
type Ring struct {
	Namespace string      `json:"namespace"`
	RingSize  int         `json:"ring_size"`
	Entries   []RingEntry `json:"entries"`
}

// RingEntry is one virtual node: owner's entry number index at position.
type RingEntry struct {
	Position string `json:"position"`
	Owner    string `json:"owner"`
	Index    int    `json:"index"`
}

// Leases is GET /v1/namespaces/{ns}/leases: the lease table in ring order.
type Leases struct {
	Namespace string `json:"namespace"`
	Arcs      []Arc  `json:"arcs"`
}

// Arc is one range (start, end] of the lease table.
type Arc struct {
	Start      string `json:"start"`
	End        string `json:"end"`
	Owner      string `json:"owner"`
	Generation uint64 `json:"generation"`
	State      string `json:"state"`      // granted, recalling or free
	ExpiresAt  string `json:"expires_at"` // empty when free
}

// Owners is GET /v1/namespaces/{ns}/owners: the live owner sessions.
type Owners struct {
	Namespace string  `json:"namespace"`
	Owners    []Owner `json:"owners"`
	Balance   Balance `json:"balance"`
}

// Owner is one owner session.
type Owner struct {
	Name      string `json:"name"`
	Addr      string `json:"addr"`
	VNodes    int    `json:"vnodes"`
	Draining  bool   `json:"draining"`
	LastHeard string `json:"last_heard"`
	// Load is the owner's latest load report; LoadReported when the
	// leader received it ("" if never); RingShare the fraction of the
	// circle its arcs cover in the desired ring.
	Load         float64 `json:"load"`
	LoadReported string  `json:"load_reported"`
	RingShare    float64 `json:"ring_share"`
}

// Balance is the balancing policy of a namespace and its counters since
// the leader took over (in Owners).
type Balance struct {
	Policy       string `json:"policy"`
	Rounds       uint64 `json:"rounds"`
	MovingRounds uint64 `json:"moving_rounds"`
	VNodesMoved  uint64 `json:"vnodes_moved"`
	RangesMoved  uint64 `json:"ranges_moved"`
}

// Drain is the answer to POST /v1/namespaces/{ns}/owners/{name}/drain.
type Drain struct {
	Namespace string `json:"namespace"`
	Owner     string `json:"owner"`
	Draining  bool   `json:"draining"`
}
