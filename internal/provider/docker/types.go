package docker

// The Engine API's bodies the provider sends and reads: only the fields it
// uses, named as testdata/engine-api.yaml names them (ContainerConfig,
// HostConfig, ContainerInspectResponse).

// createRequest is the body of POST /containers/create: the container's
// config with its host config.
type createRequest struct {
	Image           string            `json:"Image"`
	Entrypoint      []string          `json:"Entrypoint"`
	Cmd             []string          `json:"Cmd"`
	Env             []string          `json:"Env"`
	User            string            `json:"User"`
	WorkingDir      string            `json:"WorkingDir"`
	Labels          map[string]string `json:"Labels"`
	NetworkDisabled bool              `json:"NetworkDisabled"`
	HostConfig      hostConfigBody    `json:"HostConfig"`
}

// hostConfigBody is a HostConfig: what isolates the container.
type hostConfigBody struct {
	NetworkMode    string            `json:"NetworkMode"`
	ReadonlyRootfs bool              `json:"ReadonlyRootfs"`
	Privileged     bool              `json:"Privileged"`
	CapAdd         []string          `json:"CapAdd"`
	CapDrop        []string          `json:"CapDrop"`
	SecurityOpt    []string          `json:"SecurityOpt"`
	Tmpfs          map[string]string `json:"Tmpfs,omitempty"`
	Runtime        string            `json:"Runtime,omitempty"`
	RestartPolicy  *restartPolicy    `json:"RestartPolicy,omitempty"`
	LogConfig      *logConfig        `json:"LogConfig,omitempty"`
	NanoCPUs       int64             `json:"NanoCpus,omitempty"`
	Memory         int64             `json:"Memory,omitempty"`
	MemorySwap     int64             `json:"MemorySwap,omitempty"`
	PidsLimit      *int64            `json:"PidsLimit,omitempty"`
	Mounts         []mountBody       `json:"Mounts,omitempty"`
}

type restartPolicy struct {
	Name string `json:"Name"`
}

type logConfig struct {
	Type   string            `json:"Type"`
	Config map[string]string `json:"Config"`
}

type mountBody struct {
	Type   string `json:"Type"`
	Source string `json:"Source"`
	Target string `json:"Target"`
}

// inspected is what the provider reads of GET /containers/{id}/json.
type inspected struct {
	ID              string           `json:"Id"`
	State           *containerState  `json:"State"`
	Config          *inspectedConfig `json:"Config"`
	HostConfig      *hostConfigBody  `json:"HostConfig"`
	NetworkSettings *networkSettings `json:"NetworkSettings"`
}

type containerState struct {
	Status   string `json:"Status"`
	Running  bool   `json:"Running"`
	Pid      int    `json:"Pid"`
	ExitCode int    `json:"ExitCode"`
}

type inspectedConfig struct {
	Labels map[string]string `json:"Labels"`
}

type networkSettings struct {
	Networks map[string]*endpoint `json:"Networks"`
}

// endpoint is a container's attachment to a network; on "none" it has no
// address.
type endpoint struct {
	IPAddress         string `json:"IPAddress"`
	GlobalIPv6Address string `json:"GlobalIPv6Address"`
	Gateway           string `json:"Gateway"`
}
