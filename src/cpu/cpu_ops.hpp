// The CPU backend's operations, gathered into its xvk_backend_ops table in cpu_backend.cpp.
#pragma once

#include "core/backend_api.h"

namespace xvk::cpu {

xvk_status_t softmax_forward(void *impl, const xvk_softmax_forward_args *args);
xvk_status_t softmax_backward(void *impl, const xvk_softmax_backward_args *args);
xvk_status_t norm_forward(void *impl, const xvk_norm_forward_args *args);    // layer_norm and rms_norm
xvk_status_t norm_backward(void *impl, const xvk_norm_backward_args *args);  // layer_norm and rms_norm
xvk_status_t batch_norm_forward(void *impl, const xvk_batch_norm_forward_args *args);  // training and inference
xvk_status_t batch_norm_backward(void *impl, const xvk_batch_norm_backward_args *args);

}  // namespace xvk::cpu
