package policy

// infraGroup is the API group every provider below uses.
const infraGroup = "infrastructure.cluster.x-k8s.io"

// builtinKinds returns the built-in infrastructure kinds. Paths come from each
// provider's v1beta1/v1beta2 machine types; a config entry with the same group and
// kind replaces one of these.
func builtinKinds() []InfraKindConfig {
	return []InfraKindConfig{
		// Metal3 (cluster-api-provider-metal3): the image is a URL plus its checksum.
		{Group: infraGroup, Kind: "Metal3Machine", ImagePaths: []string{
			"spec.image.url", "spec.image.checksum", "spec.image.checksumType", "spec.image.format",
		}},
		// vSphere (CAPV): the VM template to clone.
		{Group: infraGroup, Kind: "VSphereMachine", ImagePaths: []string{"spec.template"}},
		// AWS (CAPA): the AMI id.
		{Group: infraGroup, Kind: "AWSMachine", ImagePaths: []string{"spec.ami.id"}},
		// Azure (CAPZ): an image reference object (id, sharedGallery, marketplace, ...).
		{Group: infraGroup, Kind: "AzureMachine", ImagePaths: []string{"spec.image"}},
		// OpenStack (CAPO): an image reference object (id, filter, imageRef).
		{Group: infraGroup, Kind: "OpenStackMachine", ImagePaths: []string{"spec.image"}},
		// GCP (CAPG): the image name or URL.
		{Group: infraGroup, Kind: "GCPMachine", ImagePaths: []string{"spec.image"}},
		// CAPI's Docker provider: the node container image.
		{Group: infraGroup, Kind: "DockerMachine", ImagePaths: []string{"spec.customImage"}},
		// CAPI's Dev provider (Docker or in-memory backend). The in-memory backend's
		// fields only tune how long its simulated VM, node, API server and etcd take
		// to come up; bootstrapTimeout and preLoadImages act only while a machine is
		// created. None of them changes a running node.
		{Group: infraGroup, Kind: "DevMachine",
			ImagePaths: []string{"spec.backend.docker.customImage"},
			IgnorePaths: []string{
				"spec.backend.inMemory",
				"spec.backend.docker.bootstrapTimeout",
				"spec.backend.docker.preLoadImages",
			}},
	}
}
