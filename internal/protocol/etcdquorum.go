package protocol

// ReasonWaitingForEtcdQuorum is the Reason of a Pending status whose plan the
// agent holds before touching a control-plane node: the etcd cluster is not whole
// (a member is not healthy, or this node's member is not yet a voting member).
// The agent checks again every few seconds and starts the plan once it is; the
// Message names the member.
const ReasonWaitingForEtcdQuorum = "WaitingForEtcdQuorum"

// ReasonEtcdQuorumTimeout is the Reason of a Failed status whose plan the agent
// held before touching a control-plane node for longer than its hold timeout
// (agent flag --etcd-quorum-hold-timeout): the etcd cluster did not become whole,
// nothing on the node changed, and the plan is refused until it is retried.
const ReasonEtcdQuorumTimeout = "EtcdQuorumTimeout"
