/* The libfabric API onesided binds: fabric, domain, endpoint, address vector, completion
 * queue, counter, memory registration, RMA, atomics, connection management, errors. */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
