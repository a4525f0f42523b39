package framework

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

var metav1CreateOptions = metav1.CreateOptions{}
