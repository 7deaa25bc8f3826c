package transport

// Placeholder: replaced by the SASL implementation (sasl.go).

type scramCredential struct{}
type scramServer struct{}

func scramCredentials(*SASL) (map[string]map[string]scramCredential, error) { return nil, nil }
