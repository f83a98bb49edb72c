package knativefake

import corev1 "k8s.io/api/core/v1"

func corev1ConditionStatus(s string) corev1.ConditionStatus { return corev1.ConditionStatus(s) }
