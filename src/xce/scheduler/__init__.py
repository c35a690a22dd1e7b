"""The scheduler: a pure function from an immutable view of the cluster (``view.ClusterView``) to a plan."""
