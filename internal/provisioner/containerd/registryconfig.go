package containerd

// RegistryConfigPath is the registry host directory (CRI's registry config_path) containerd's
// main config names, "" when it names none: where the node's image pulls find their
// mirrors and authorities, which the agent's runtime pulls follow too.
func (c *Handler) RegistryConfigPath() (string, error) {
	cfg, version, err := c.readMain()
	if err != nil {
		return "", err
	}
	return registryConfigPath(cfg, version), nil
}

func registryConfigPath(cfg map[string]any, version int64) string {
	plugin := "io.containerd.cri.v1.images" // config version 3 and later
	if version < 3 {
		plugin = "io.containerd.grpc.v1.cri"
	}
	plugins, _ := cfg["plugins"].(map[string]any)
	p, _ := plugins[plugin].(map[string]any)
	reg, _ := p["registry"].(map[string]any)
	path, _ := reg["config_path"].(string)
	return path
}
