"""A real node for the dev cluster (kubelet, containerd, runc, CNI, kube-scheduler) and the agentrun image.

See docs/dev/real-node.md.
"""
