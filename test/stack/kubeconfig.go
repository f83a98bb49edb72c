package stack

import (
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func clientcmdConfig(server, token string) *clientcmdapi.Config {
	c := clientcmdapi.NewConfig()
	c.Clusters["stack"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["stack"] = &clientcmdapi.Context{Cluster: "stack", AuthInfo: "admin", Namespace: Namespace}
	c.CurrentContext = "stack"
	return c
}
